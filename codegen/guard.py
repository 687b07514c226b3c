"""The operating system's guard around a generated program: Landlock and seccomp, applied by the
sandbox's child process to itself before it reads the program (``codegen.sandbox``).

Both are kernel features that a process can only tighten, never loosen, and that every thread and
child it starts inherits; nothing the program does in Python (or through ctypes, or in a C extension)
can lift them:

- **Landlock** (Linux 5.13+): files. Writing, creating, removing, renaming and truncating only inside
  the run's folder (no device files there); reading only the paths given (Python's installation, the
  system's libraries, the folder); executing no file at all. From Landlock ABI 4 on no TCP connect or
  bind either, and from ABI 6 on no signal to a process outside the sandbox and no abstract Unix socket.
- **seccomp** (a BPF filter on system calls): no new process (fork, vfork, execve, execveat, clone
  without CLONE_THREAD; clone3 answers ENOSYS so that threads fall back on clone), no socket, no
  ptrace or cross-process memory access, no new namespace, mount, keyring, BPF or io_uring. Threads
  are allowed (OR-Tools and NumPy start them).

``apply`` returns what it could apply; ``available`` says, without applying anything, what this
machine offers. The module imports only the standard library: the sandbox's child runs it as
source (``python -I``), before the program is read.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every architecture
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
FILE_ACCESS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The rights a rule on a file (not a folder) may carry."""
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6

PR_SET_NO_NEW_PRIVS, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 38, 1, 1
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, SECCOMP_RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
EPERM, ENOSYS = 1, 38
CLONE_THREAD = 0x00010000
SYSCALLS = {
    # machine: (audit arch, the seccomp syscall, {name: number}); fork and vfork exist on x86_64 only
    "x86_64": (0xC000003E, 317, {
        "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone": 56, "clone3": 435, "socket": 41,
        "socketpair": 53, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272,
        "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "bpf": 321,
        "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249, "io_uring_setup": 425,
        "userfaultfd": 323, "init_module": 175, "finit_module": 313, "kexec_load": 246, "reboot": 169,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsmount": 432,
    }),
    "aarch64": (0xC00000B7, 277, {
        "execve": 221, "execveat": 281, "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "unshare": 97, "setns": 268,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "bpf": 280, "perf_event_open": 241,
        "keyctl": 219, "add_key": 217, "request_key": 218, "io_uring_setup": 425, "userfaultfd": 282,
        "init_module": 105, "finit_module": 273, "kexec_load": 104, "reboot": 142,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsmount": 432,
    }),
}  # fmt: skip


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none)."""
    version = _libc().syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, int(version))


def available() -> dict:
    """What this machine offers, nothing applied: {"landlock": ABI version or 0, "seccomp": bool}."""
    seccomp = platform.machine() in SYSCALLS
    try:
        with open("/proc/self/status") as status:
            seccomp = seccomp and any(line.startswith("Seccomp:") for line in status)
    except OSError:
        seccomp = False
    return {"landlock": landlock_abi(), "seccomp": seccomp}


def restrict_files(writable: str, readable: list[str]) -> int:
    """Landlock on this process: writes only beneath ``writable``, reads only beneath ``readable`` (and
    ``writable``), no file executed; no TCP (ABI 4+), no signal or abstract socket outside (ABI 6+).
    Returns the ABI applied; raises OSError when the kernel refuses."""
    libc, abi = _libc(), landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available (Linux 5.13 or later, with Landlock enabled)")
    handled = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR
    handled |= MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM
    handled |= (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0) | (IOCTL_DEV if abi >= 5 else 0)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("<QQQ", handled, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        reading = READ_FILE | READ_DIR
        writing = handled & ~(EXECUTE | MAKE_CHAR | MAKE_BLOCK | IOCTL_DEV)
        for path, access in [*((p, reading) for p in readable), (writable, writing)]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path this machine lacks: nothing to allow
            try:
                allowed = access if os.path.isdir(path) else access & FILE_ACCESS
                rule = struct.pack("<Qi", allowed, fd)
                if libc.syscall(LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, 0) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) refused")
        if libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0) < 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def seccomp_filter(machine: str | None = None) -> bytes:
    """The BPF program (struct sock_filter[]) of the module docstring's seccomp rules for ``machine``
    (default: this one's): another architecture's calls are killed, x32 calls refused."""
    arch, _, numbers = SYSCALLS[machine or platform.machine()]
    ld, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JSET/JGE|K, BPF_RET|K
    refuse = SECCOMP_RET_ERRNO | EPERM
    program = [
        (ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, SECCOMP_RET_KILL_PROCESS),  # seccomp_data.arch
        (ld, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch == SYSCALLS["x86_64"][0]:
        program += [(jge, 0, 1, 0x40000000), (ret, 0, 0, refuse)]  # the x32 ABI's calls
    for name, number in numbers.items():
        if name == "clone":  # a thread (CLONE_THREAD in its flags, the first argument) is allowed
            program += [(jeq, 0, 4, number), (ld, 0, 0, 16), (jset, 0, 1, CLONE_THREAD),
                        (ret, 0, 0, SECCOMP_RET_ALLOW), (ret, 0, 0, refuse)]  # fmt: skip
        else:
            answer = SECCOMP_RET_ERRNO | ENOSYS if name == "clone3" else refuse
            program += [(jeq, 0, 1, number), (ret, 0, 0, answer)]
    program.append((ret, 0, 0, SECCOMP_RET_ALLOW))
    return b"".join(struct.pack("<HBBI", *insn) for insn in program)


def restrict_calls() -> None:
    """seccomp on this process and all its threads (the filter of ``seccomp_filter``); raises OSError
    when the kernel refuses or the machine is not one of ``SYSCALLS``."""
    if platform.machine() not in SYSCALLS:
        raise OSError(f"no seccomp filter for {platform.machine()} (only {', '.join(SYSCALLS)})")
    libc, code = _libc(), seccomp_filter()
    buffer = ctypes.create_string_buffer(code)
    prog = struct.pack("<HxxxxxxQ", len(code) // 8, ctypes.addressof(buffer))  # struct sock_fprog
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) refused")
    syscall = SYSCALLS[platform.machine()][1]
    if libc.syscall(syscall, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, prog) != 0:
        raise OSError(ctypes.get_errno(), f"seccomp: {os.strerror(ctypes.get_errno())}")


def apply(writable: str, readable: list[str]) -> dict:
    """Landlock, then seccomp, on this process (``restrict_files``, ``restrict_calls``): {"landlock": the
    ABI applied or the error, "seccomp": True or the error}."""
    applied = {}
    try:
        applied["landlock"] = restrict_files(writable, readable)
    except OSError as exc:
        applied["landlock"] = str(exc)
    try:
        restrict_calls()
        applied["seccomp"] = True
    except OSError as exc:
        applied["seccomp"] = str(exc)
    return applied
