"""RLEA's local code models on this CPU: load time, prompt and generation speed at 1 and 2 threads,
memory, and how often their programs run, on the benchmark's direct prompt.

Qwen2.5-Coder-0.5B-Instruct (the ``rlea`` extra) and -1.5B-Instruct (``rlea-qwen``) through xllamacpp's
prebuilt llama.cpp. Units: prompt tokens read per second (a one-token reply) and tokens generated per
second (the same prompt again, which llama.cpp's prompt cache serves, so the time is the generation's);
the ratio is against one thread of the same model, measured in the same run. Then ``--programs`` direct
generations per model for the first train problems, each run in the sandbox and checked (ran / valid).

    python bench/rlea_local_model.py [--models qwen2.5-coder-0.5b qwen2.5-coder-1.5b] [--programs 4] [--max-tokens 768]
"""

import argparse
import resource
import time

from ppoor.codegen.benchmark import load_problems, shipped_problems
from ppoor.codegen.executor import Executor
from ppoor.codegen.llm import LOCAL_MODELS, LocalChat
from ppoor.codegen.memory import Memory
from ppoor.codegen.rag import Retriever
from ppoor.codegen.sandbox import sandbox_or_exit


def speeds(model: str, threads: int, prompt: list[dict], max_tokens: int) -> dict:
    """Load seconds, prompt tokens/s and generated tokens/s of ``model`` on ``threads`` threads."""
    start = time.perf_counter()
    llm = LocalChat(threads, seed=1, model=model)
    load = time.perf_counter() - start
    start = time.perf_counter()
    first = llm.chat(prompt, 1, 0.0)
    read = time.perf_counter() - start
    start = time.perf_counter()
    reply = llm.chat(prompt, max_tokens, 0.0)
    generate = time.perf_counter() - start
    return {"load": load, "prompt_tokens": first.prompt_tokens, "prompt_rate": first.prompt_tokens / read,
            "generated": reply.completion_tokens, "rate": reply.completion_tokens / generate}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=LOCAL_MODELS, default=list(LOCAL_MODELS))
    parser.add_argument("--programs", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=768)
    args = parser.parse_args()
    if args.programs < 0 or not 16 <= args.max_tokens <= 8192:
        parser.error("--programs must be >= 0 and --max-tokens within 16..8192")
    sandbox = sandbox_or_exit(60, 2048)
    problems = load_problems(shipped_problems(), "train")
    prompt = [{"role": "user", "content": problems[0]["description"] + "\n\n" + problems[0]["signature"]}]
    for model in args.models:
        try:
            one = speeds(model, 1, prompt, args.max_tokens)
        except ValueError as exc:
            print(f"{model}: not installed ({exc})")
            continue
        two = speeds(model, 2, prompt, args.max_tokens)
        for threads, m in ((1, one), (2, two)):
            print(f"{model} threads={threads} load={m['load']:.2f}s prompt={m['prompt_tokens']} tokens at "
                  f"{m['prompt_rate']:.1f}/s (x{m['prompt_rate'] / one['prompt_rate']:.2f} of 1 thread), "
                  f"generated={m['generated']} at {m['rate']:.1f}/s (x{m['rate'] / one['rate']:.2f} of 1 thread)",
                  flush=True)
        llm = LocalChat(1, seed=1, model=model)
        executor = Executor(llm, llm, sandbox, Retriever.default(), Memory(), args.max_tokens, 0.2)
        ran = valid = 0
        for problem in problems[: args.programs]:
            attempt = executor.write(problem, "direct", None)
            ran += attempt.ran
            valid += attempt.valid
            print(f"  {problem['name']}: ran={attempt.ran} valid={attempt.valid} "
                  f"{attempt.feedback.splitlines()[-1][:100]!r}", flush=True)
        print(f"{model}: programs that ran {ran}/{args.programs}, valid {valid}/{args.programs} (threads=1)", flush=True)
    print(f"peak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
