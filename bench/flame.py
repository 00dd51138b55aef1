#!/usr/bin/env python3
"""Flame graphs of a broker process under a benchmark's load, with `perf` (Linux).

    rec = flame.Recorder(pid, "out.perf.data")   # perf record of the process, all its threads
    ...                                           # the load
    rec.stop()
    folded = flame.collapse("out.perf.data", t0, t1)   # samples between two time.monotonic()s
    flame.write_svg(folded, "title", "out.svg")
    print(flame.table(folded))                    # where the time goes, by function and thread

Stacks are unwound with DWARF (`--call-graph dwarf`): release builds keep line tables but no
frame pointers. A JVM's compiled frames are named from /tmp/perf-PID.map, which Kafka writes at
exit when started with JVM_FLAME_OPTS (frame pointers kept, the map dumped), so its stacks are
unwound with frame pointers instead. Timestamps are CLOCK_MONOTONIC, the clock of Python's
time.monotonic(), so a benchmark keeps only the samples of its measured period.

Also a command: `flame.py PERF_DATA OUT.svg [TITLE]` draws a recording whole.
"""

import collections
import html
import os
import re
import subprocess
import sys

# Kafka's JVM: keep frame pointers and write the JIT's symbol map at exit (JDK 17+).
JVM_FLAME_OPTS = ("-XX:+PreserveFramePointer -XX:+UnlockDiagnosticVMOptions "
                  "-XX:+DumpPerfMapAtExit")
HZ = int(os.environ.get("BENCH_FLAME_HZ", "199"))


class Recorder:
    """`perf record` of one process (every thread) until stop()."""

    def __init__(self, pid, out, jvm=False):
        self.out = out
        graph = ["--call-graph", "fp"] if jvm else ["--call-graph", "dwarf,16384"]
        cmd = ["perf", "record", "-q", "-F", str(HZ), "-e", "cpu-clock", "--clockid",
               "monotonic", *graph, "-p", str(pid), "-o", out]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self):
        """Ends the recording (SIGINT, as Ctrl-C: perf writes its file and exits)."""
        if self.proc.poll() is None:
            self.proc.send_signal(2)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return os.path.exists(self.out)


HEADER = re.compile(r"^(\S.*?)\s+(\d+)\s+(\d+\.\d+):")
FRAME = re.compile(r"^\s+[0-9a-f]+\s+(.*?)(?:\s+\((.*)\))?$")


def _name(sym, dso):
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    if sym == "[unknown]" and dso:
        return f"[{os.path.basename(dso)}]"
    # Rust's hash suffix and generic noise make names long; keep them readable.
    sym = re.sub(r"::h[0-9a-f]{16}$", "", sym)
    return sym.replace(";", ":")


def collapse(perf_data, t0=None, t1=None):
    """{"thread;root;...;leaf": samples} of the samples between monotonic times t0 and t1."""
    cmd = ["perf", "script", "-i", perf_data, "-F", "comm,tid,time,ip,sym,dso"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         errors="replace")
    folded = collections.Counter()
    frames, keep, thread = [], False, ""

    def flush():
        if keep and frames:
            folded[";".join([thread] + frames[::-1])] += 1

    for line in p.stdout:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            frames, keep = [], False
            continue
        m = HEADER.match(line)
        if m:
            flush()
            frames = []
            t = float(m.group(3))
            keep = (t0 is None or t >= t0) and (t1 is None or t <= t1)
            # Threads of one kind share a name up to a number (tokio-runtime-w, weir-up-3).
            thread = re.sub(r"[-_ ]?\d+$", "", m.group(1)) or "?"
            continue
        f = FRAME.match(line)
        if f:
            frames.append(_name(f.group(1), f.group(2)))
    flush()
    p.wait()
    return folded


def write_folded(folded, path):
    """The stacks in the folded format (`thread;root;...;leaf count` per line) that other flame
    graph tools read."""
    with open(path, "w") as f:
        for stack, n in sorted(folded.items()):
            f.write(f"{stack} {n}\n")


def table(folded, top=20, focus=None):
    """Markdown: the threads' shares, the functions with the most samples of their own (self),
    and the functions whose names contain `focus` (the broker's own code) with the most samples
    in all (each counted once per sample: what runs in them and under them)."""
    total = sum(folded.values()) or 1
    threads, selfs, totals = collections.Counter(), collections.Counter(), collections.Counter()
    for stack, n in folded.items():
        parts = stack.split(";")
        threads[parts[0]] += n
        selfs[parts[-1]] += n
        for f in set(parts[1:]):
            if focus is None or focus in f:
                totals[f] += n
    out = [f"{total:,} samples.", "", "| thread | share |", "|---|---:|"]
    out += [f"| `{t}` | {n / total:.1%} |" for t, n in threads.most_common(8)]
    out += ["", "| function (self) | share |", "|---|---:|"]
    out += [f"| `{_short(f)}` | {n / total:.1%} |" for f, n in selfs.most_common(top)]
    label = f"function naming `{focus}` (total)" if focus else "function (total)"
    out += ["", f"| {label} | share |", "|---|---:|"]
    out += [f"| `{_short(f)}` | {n / total:.1%} |" for f, n in totals.most_common(top)]
    return "\n".join(out)


def _short(name, width=110):
    name = name.replace("|", "/")
    return name if len(name) <= width else name[:width - 3] + "..."


def write_svg(folded, title, path, width=1200, row=16):
    """A flame graph (root at the bottom) as one self-contained SVG; hover shows the frame."""
    tree = {"n": 0, "kids": {}}
    for stack, n in folded.items():
        node = tree
        node["n"] += n
        for f in stack.split(";"):
            node = node["kids"].setdefault(f, {"n": 0, "kids": {}})
            node["n"] += n
    total = tree["n"] or 1
    depth = _depth(tree)
    height = (depth + 3) * row
    rects = []

    def draw(node, name, x, level):
        w = node["n"] / total * (width - 20)
        if w < 0.3:
            return
        y = height - (level + 2) * row
        hue = 20 + (hash(name.split("::")[0]) % 40)
        label = html.escape(name)
        share = f"{node['n'] / total:.2%}"
        text = html.escape(_fit(name, w))
        rects.append(f'<g><title>{label} ({node["n"]} samples, {share})</title>'
                     f'<rect x="{10 + x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
                     f'fill="hsl({hue},90%,{55 + level % 3 * 5}%)"/>'
                     f'<text x="{13 + x:.1f}" y="{y + row - 4}">{text}</text></g>')
        cx = x
        for kid_name, kid in sorted(node["kids"].items()):
            draw(kid, kid_name, cx, level + 1)
            cx += kid["n"] / total * (width - 20)

    x = 0.0
    for name, kid in sorted(tree["kids"].items()):
        draw(kid, name, x, 0)
        x += kid["n"] / total * (width - 20)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<rect width="100%" height="100%" fill="#fafafa"/>',
           f'<text x="10" y="{row}" font-size="13">{html.escape(title)} ({total:,} samples)'
           '</text>', *rects, "</svg>"]
    with open(path, "w") as f:
        f.write("\n".join(svg))


def _depth(node):
    return 1 + max((_depth(k) for k in node["kids"].values()), default=0)


def _fit(name, w):
    chars = int(w / 6.6)
    if chars < 3:
        return ""
    return name if len(name) <= chars else name[:chars - 2] + ".."


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("flame.py PERF_DATA OUT.svg [TITLE]")
    f = collapse(sys.argv[1])
    write_svg(f, sys.argv[3] if len(sys.argv) > 3 else sys.argv[1], sys.argv[2])
    print(table(f))
