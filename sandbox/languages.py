"""The languages a program may be written in, and how the sandbox compiles and runs each one.

| language     | aliases          | source file            | compile (once per program)            | run                 |
| ------------ | ---------------- | ---------------------- | ------------------------------------- | ------------------- |
| `python`     | py, python3      | solution.py            | `compile()` in a child of the driver  | python3 -I -B       |
| `c`          |                  | main.c                 | gcc -O2 -std=gnu11 ... -lm            | ./main              |
| `cpp`        | c++, cxx         | main.cpp               | g++ -O2 -std=gnu++17                  | ./main              |
| `java`       |                  | Main.java (or `X.java` for the one public class X) | javac | java -Xmx... X |
| `javascript` | js, node, nodejs | main.js                | node --check (syntax only)            | node                |

Java and JavaScript get `startup_s` (1 s, 0.5 s) added to each test's time limit for their runtime's start.
The compile step has its own limits (`Limits.compile_time_s`, `Limits.compile_memory_mb`); its message
becomes the CE detail. Memory: C, C++ and Python run under RLIMIT_AS = `memory_mb`; the JVM and V8
reserve far more address space than they use, so Java and JavaScript get no RLIMIT_AS and are bounded by
their own heap flag (`-Xmx`, `--max-old-space-size`) plus, under Docker, the container's memory cgroup.
Only `stdio` tests exist for languages other than Python (`call` and `assert` need the Python runner).
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

# JVM flags for one core and a fast start: no perf-data file in /tmp, the serial collector.
_JVM = ("-XX:+UseSerialGC", "-XX:-UsePerfData", "-XX:MaxMetaspaceSize=128m")


@dataclass(frozen=True)
class Language:
    """How one language is compiled and run inside the sandbox.

    source: the program's file name in the work folder ("{cls}" is Java's class name). compile / run:
    argv templates, run in the work folder, with "{src}", "{cls}", "{memory_mb}" and
    "{compile_memory_mb}" filled in per job; compile None: Python (checked by the driver itself).
    tools: executables the sandbox must have. address_space: RLIMIT_AS = memory_mb applies (else the
    language's own heap flag bounds memory). startup_s: seconds added to each test's time limit for the
    runtime's own start (a JVM takes ~0.5 s, more on a loaded machine), so that a correct Java program is
    not TLE where the same C++ program passes.
    """

    name: str
    source: str
    compile: tuple[str, ...] | None
    run: tuple[str, ...]
    tools: tuple[str, ...]
    address_space: bool = True
    startup_s: float = 0.0


LANGUAGES: dict[str, Language] = {
    "python": Language("python", "solution.py", None, ("python3", "-I", "-B", "{src}"), ("python3",)),
    "c": Language("c", "main.c", ("gcc", "-O2", "-pipe", "-std=gnu11", "-o", "main", "{src}", "-lm"), ("./main",),
                  ("gcc",)),
    "cpp": Language("cpp", "main.cpp", ("g++", "-O2", "-pipe", "-std=gnu++17", "-o", "main", "{src}"), ("./main",),
                    ("g++",)),
    "java": Language("java", "{cls}.java",
                     ("javac", "-J-Xmx{compile_memory_mb}m", *("-J" + f for f in _JVM), "-J-XX:TieredStopAtLevel=1",
                      "-encoding", "UTF-8", "-d", ".", "{src}"),
                     ("java", "-Xmx{memory_mb}m", "-Xss64m", *_JVM, "-cp", ".", "{cls}"), ("javac", "java"),
                     address_space=False, startup_s=1.0),
    "javascript": Language("javascript", "main.js", ("node", "--check", "{src}"),
                           ("node", "--max-old-space-size={memory_mb}", "{src}"), ("node",), address_space=False,
                           startup_s=0.5),
}
ALIASES = {"py": "python", "python3": "python", "c++": "cpp", "cxx": "cpp", "js": "javascript", "node": "javascript",
           "nodejs": "javascript"}


def parse_language(name: object) -> Language:
    """The Language for a name or alias (case-insensitive). Raises ValueError naming the supported ones."""
    key = name.strip().lower() if isinstance(name, str) else None
    key = ALIASES.get(key, key) if key is not None else None
    if key not in LANGUAGES:
        raise ValueError(f"unknown language {name!r}; supported: {', '.join(LANGUAGES)} "
                         f"(aliases: {', '.join(sorted(ALIASES))})")
    return LANGUAGES[key]


def java_class_name(source: str) -> str:
    """The class Java runs: the one public top-level class of `source`, else `Main` (the first public one
    when there are several: javac then reports the error)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)
    depth, top = 0, []
    for m in re.finditer(r"[{}]|\bpublic\s+(?:(?:final|abstract|strictfp|sealed)\s+)*class\s+([A-Za-z_$][\w$]*)", text):
        if m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            depth = max(0, depth - 1)
        elif depth == 0:
            top.append(m.group(1))
    return top[0] if top else "Main"


def missing_tools(language: Language) -> list[str]:
    """The tools of `language` not on this machine's PATH (what the bwrap and none backends run)."""
    return [tool for tool in language.tools if shutil.which(tool) is None]
