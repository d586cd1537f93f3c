"""llama.cpp's own generation tools, built from the vendored tree, run and parsed for bench/run.py.

* ``llama-speculative-simple`` runs every speculative mode (``--spec-type``); it is the loop that
  llamaspec's engine follows.
* ``llama-completion`` (``-no-cnv``) runs the no-speculation mode: speculative-simple refuses
  ``--spec-type none`` ("failed to initialize speculative decoding").

Both are built once into ``build/llama-tools`` (static, Release, like the extension) from
``vendor/llama.cpp``, so they run the same llama.cpp code as llamaspec.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
LLAMA_CPP_DIR = REPO / "vendor" / "llama.cpp"
BUILD_DIR = REPO / "build" / "llama-tools"
SPECULATIVE = "llama-speculative-simple"
COMPLETION = "llama-completion"


def ensure_built(build_dir: Path = BUILD_DIR, source_dir: Path = LLAMA_CPP_DIR, jobs: int = 2) -> dict[str, Path]:
    """Paths of the two tools, configuring and building them first when missing (reuses ``build_dir``).

    They are built through llamaspec's own CMakeLists.txt (LLAMASPEC_BUILD_LLAMA_TOOLS), so ggml gets
    exactly the extension's flags (GGML_NATIVE, AMX kernels left out) from the same patched tree.
    """
    def find(name: str) -> Optional[Path]:
        hits = sorted(build_dir.glob(f"**/bin/{name}"))
        return hits[0] if hits else None

    binaries = {name: find(name) for name in (SPECULATIVE, COMPLETION)}
    missing = [name for name, path in binaries.items() if path is None]
    if not missing:
        return binaries
    if not (source_dir / "include" / "llama.h").exists():
        raise FileNotFoundError(f"no llama.cpp tree at {source_dir}: build llamaspec first (pip install .)")
    if not (build_dir / "CMakeCache.txt").exists():
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(build_dir), *generator, "-DCMAKE_BUILD_TYPE=Release",
                        "-DLLAMASPEC_BUILD_LLAMA_TOOLS=ON", f"-DLLAMASPEC_LLAMA_CPP_DIR={source_dir}",
                        f"-DPython_EXECUTABLE={sys.executable}"], check=True)
    print(f"building {', '.join(missing)} in {build_dir} (the first build takes ~10 min on 2 cores)", flush=True)
    subprocess.run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *missing], check=True)
    binaries = {name: find(name) for name in (SPECULATIVE, COMPLETION)}
    if any(path is None for path in binaries.values()):
        raise FileNotFoundError(f"the build did not produce {SPECULATIVE} and {COMPLETION} under {build_dir}")
    return binaries


@dataclass
class ToolRun:
    """What one run of a llama.cpp tool printed."""

    command: list[str]
    text: bytes               # the generated text (prompt echo removed)
    n_predict: int            # tokens generated, as the tool counts them
    n_drafted: int
    n_accepted: int
    decode_seconds: float     # see DECODE_DEFINITION
    decode_tokens: int        # tokens whose decoding decode_seconds covers
    rounds: list[tuple[int, int, int]] = field(default_factory=list)  # (drafted, accepted, last token id)


DECODE_DEFINITION = {
    SPECULATIVE: "wall clock of the tool's decode loop ('decoded N tokens in X seconds'; prompt excluded), "
                 "over its N generated tokens",
    COMPLETION: "llama_perf 'eval time' + 'sampling time' over its eval runs (one single-token target pass each; "
                "the first token comes from the prompt pass)",
}

_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_COUNT = re.compile(r"(n_predict|n_drafted|n_accept)\s+=\s+(\d+)")
_ACCEPTED = re.compile(r"n_accept\s+=")
_ROUND = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")
_EVAL = re.compile(r"\beval time =\s+([\d.]+) ms /\s+(\d+) runs")
_SAMPLING = re.compile(r"sampling time =\s+([\d.]+) ms")


def _run(command: list[str], marker: re.Pattern, attempts: int = 5, env: Optional[dict] = None) -> tuple[bytes, str]:
    """Run a tool until its output is complete, i.e. shows ``marker``, the last line we read.

    llama.cpp's logger is asynchronous and never flushed at exit, so under CPU load the last lines
    (even of stdout) are sometimes lost; everything logged before a line that came out did come out.
    """
    for _ in range(attempts):
        proc = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                              env=None if env is None else {**os.environ, **env})
        stderr = proc.stderr.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            raise RuntimeError(f"{Path(command[0]).name} failed ({proc.returncode}):\n{stderr[-3000:]}")
        if marker.search(stderr):
            return proc.stdout, stderr
    raise RuntimeError(f"{Path(command[0]).name} printed incomplete output {attempts} times: {' '.join(command)}")


def _common_args(target: str, prompt: str, n_predict: int, threads: int, n_ctx: int, repack: bool) -> list[str]:
    return ["-m", target, "-p", prompt, "--no-escape", "-n", str(n_predict), "--temp", "0", "-s", "0",
            "-t", str(threads), "-c", str(n_ctx), "-b", str(n_ctx), *([] if repack else ["--no-repack"])]


def run_speculative(binary: Path, target: str, draft: Optional[str], spec_type: str, n_max: int,
                    ngram_size_n: int, prompt: str, n_predict: int, threads: int, n_ctx: int, repack: bool,
                    record_rounds: bool = False, env: Optional[dict] = None) -> ToolRun:
    """``llama-speculative-simple``; ``record_rounds`` turns on debug logging to read every round; ``env``:
    variables set for the tool (e.g. ``GGML_CPU_MULTIDOT=0``: llama.cpp's own kernels, patches/0008 off)."""
    command = [str(binary), *_common_args(target, prompt, n_predict, threads, n_ctx, repack),
               "--spec-type", spec_type, "--spec-draft-n-max", str(n_max),
               "--spec-ngram-simple-size-n", str(ngram_size_n), "--spec-ngram-simple-size-m", str(n_max),
               # ngram-mod as llamaspec configures it (make_speculative_params in src/drafter.cpp)
               "--spec-ngram-mod-n-match", str(ngram_size_n), "--spec-ngram-mod-n-min", "1",
               "--spec-ngram-mod-n-max", str(n_max)]
    if draft is not None:
        command += ["-md", draft]
    if record_rounds:
        command += ["-lv", "5"]
    stdout, stderr = _run(command, _ACCEPTED, env=env)
    decoded = _DECODED.search(stderr)
    counts = dict((k, int(v)) for k, v in _COUNT.findall(stderr))
    if decoded is None or len(counts) != 3:
        raise RuntimeError(f"could not parse the output of {' '.join(command)}:\n{stderr[-3000:]}")
    # stdout: "\n\n" + prompt pieces + generated pieces + "\n\n" + "\n\n", where the last "\n\n" may be lost
    # (see _run): the text keeps it when it came; it only serves as a prefix check.
    body = stdout[2:-2]
    start = body.find(prompt.encode("utf-8"))
    if start < 0:
        raise RuntimeError(f"the prompt echo was not found in the output of {SPECULATIVE}")
    return ToolRun(command=command, text=body[start + len(prompt.encode("utf-8")):],
                   n_predict=counts["n_predict"], n_drafted=counts["n_drafted"], n_accepted=counts["n_accept"],
                   decode_seconds=float(decoded.group(2)), decode_tokens=int(decoded.group(1)),
                   rounds=[(int(d), int(a), int(t)) for a, d, t in _ROUND.findall(stderr)])


def run_completion(binary: Path, target: str, prompt: str, n_predict: int, threads: int, n_ctx: int,
                   repack: bool, ubatch: int) -> ToolRun:
    """``llama-completion -no-cnv``: plain greedy decoding of the target.

    ``ubatch`` = prompt tokens - 1 makes it decode the last prompt token on its own, as
    llama-speculative-simple and llamaspec do (they keep it for the first round): with CPU weight
    repacking the batch shape changes the rounding, which can flip near-tie greedy choices.
    """
    command = [str(binary), *_common_args(target, prompt, n_predict, threads, n_ctx, repack),
               "-ub", str(ubatch), "-no-cnv", "--no-display-prompt"]
    stdout, stderr = _run(command, _EVAL)
    evaluated, sampling = _EVAL.search(stderr), _SAMPLING.search(stderr)
    if evaluated is None or sampling is None:
        raise RuntimeError(f"could not parse the output of {' '.join(command)}:\n{stderr[-3000:]}")
    text = stdout.removesuffix(b"\n\n").removesuffix(b" [end of text]\n")
    runs = int(evaluated.group(2))
    return ToolRun(command=command, text=text, n_predict=runs + 1, n_drafted=0, n_accepted=0,
                   decode_seconds=(float(evaluated.group(1)) + float(sampling.group(1))) / 1000.0,
                   decode_tokens=runs)
