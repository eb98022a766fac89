"""The latency monitor: per-event latest, maximum and a history of 160 samples.

Events (``command``, ``fast-command``, ``jobs-processing``, ``aof-*`` ...) are
sampled only when they last at least ``latency-monitor-threshold`` ms, and
samples within the same second are merged keeping the maximum, as in Disque.
"""

from __future__ import annotations

import time
from typing import Final

HISTORY: Final = 160


class LatencyEvent:
    __slots__ = ("max", "samples")

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = []  # (unix time, ms), oldest first
        self.max = 0


class LatencyMonitor:
    def __init__(self) -> None:
        self.events: dict[str, LatencyEvent] = {}

    def add(self, event: str, latency_ms: int, now_s: int | None = None) -> None:
        now_s = int(time.time()) if now_s is None else now_s
        entry = self.events.get(event)
        if entry is None:
            entry = self.events[event] = LatencyEvent()
        if entry.samples and entry.samples[-1][0] == now_s:
            t, ms = entry.samples[-1]
            entry.samples[-1] = (t, max(ms, latency_ms))
        else:
            entry.samples.append((now_s, latency_ms))
            del entry.samples[:-HISTORY]
        entry.max = max(entry.max, latency_ms)

    def add_since(self, event: str, started: float, threshold_ms: int) -> None:
        """Sample a run that began at ``started`` (``time.perf_counter``) if it lasted at
        least ``threshold_ms`` (0: the monitor is off)."""
        if threshold_ms:
            ms = int((time.perf_counter() - started) * 1000)
            if ms >= threshold_ms:
                self.add(event, ms)

    def reset(self, events: list[str] | None = None) -> int:
        if not events:
            count = len(self.events)
            self.events.clear()
            return count
        return sum(1 for e in events if self.events.pop(e, None) is not None)

    # ------------------------------------------------------------------
    # LATENCY GRAPH and LATENCY DOCTOR.

    def graph(self, event: str, now_s: int | None = None) -> str | None:
        """Redis's LATENCY GRAPH text for ``event``, or None when it has no samples."""
        entry = self.events.get(event)
        if entry is None:
            return None
        now_s = int(time.time()) if now_s is None else now_s
        values = [ms for _, ms in entry.samples]
        labels = [_age_label(now_s - t) for t, _ in entry.samples]
        high = max(values, default=0)
        low = min(values, default=0)
        out = f"{event} - high {high} ms, low {low} ms (all time high {entry.max} ms)\n"
        out += "-" * GRAPH_COLUMNS + "\n"
        return out + sparkline(values, labels, GRAPH_COLUMNS, GRAPH_ROWS)

    def stats(self, event: str, now_s: int) -> EventStats:
        """Samples, average, mean absolute deviation and period of ``event``."""
        entry = self.events[event]
        values = [ms for _, ms in entry.samples]
        if not values:
            return EventStats(0, 0, 0, 0, entry.max)
        avg = sum(values) // len(values)
        mad = sum(abs(avg - v) for v in values) // len(values)
        period = now_s - min(t for t, _ in entry.samples) or 1
        return EventStats(len(values), avg, mad, period, entry.max)

    def doctor(
        self,
        threshold_ms: int,
        slowlog_slower_than_us: int,
        hz: int,
        appendfsync: str,
        now_s: int | None = None,
    ) -> str:
        """LATENCY DOCTOR: the events seen, then advice (Redis's report, for Disque)."""
        now_s = int(time.time()) if now_s is None else now_s
        if not self.events and threshold_ms == 0:
            return _DOCTOR_DISABLED
        report: list[str] = []
        advice: dict[str, None] = {}  # an ordered set of advice keys
        for number, (event, _) in enumerate(self.events.items(), 1):
            if number == 1:
                report.append(_DOCTOR_INTRO)
            s = self.stats(event, now_s)
            report.append(
                f"{number}. {event}: {s.samples} latency spikes (average {s.avg}ms, "
                f"mean deviation {s.mad}ms, period {s.period / max(s.samples, 1):.2f} sec). "
                f"Worst all time event {s.all_time_high}ms.\n"
            )
            if event == "command":
                if slowlog_slower_than_us < 0:
                    advice["slowlog_enabled"] = None
                elif slowlog_slower_than_us // 1000 > threshold_ms:
                    advice["slowlog_tuning"] = None
                advice["slowlog_inspect"] = None
                advice["large_objects"] = None
            elif event == "fast-command":
                advice["scheduler"] = None
            elif event in ("jobs-processing", "eviction-cycle"):
                advice["hz"] = None
                advice["large_objects"] = None
            elif event.startswith("aof-"):
                advice["ssd"] = None
                advice["local_disk"] = None
                if event == "aof-fsync-always":
                    advice["relax_fsync"] = None
        if not self.events:
            return _DOCTOR_NOTHING
        texts = []
        for key in _ADVICE_ORDER:
            if key not in advice:
                continue
            if key == "hz" and hz >= 100:
                continue
            if key == "relax_fsync" and appendfsync != "always":
                continue
            text = _ADVICE[key]
            if "%d" in text:
                text = text % (threshold_ms * 1000)
            texts.append(text)
        if not texts:
            report.append(_DOCTOR_NO_ADVICE)
        else:
            report.append("\nI have a few advices for you:\n\n")
            report.extend(texts)
        return "".join(report)


class EventStats:
    __slots__ = ("all_time_high", "avg", "mad", "period", "samples")

    def __init__(self, samples: int, avg: int, mad: int, period: int, all_time_high: int) -> None:
        self.samples = samples
        self.avg = avg
        self.mad = mad
        self.period = period
        self.all_time_high = all_time_high


# ----------------------------------------------------------------------
# The sparkline renderer of Redis (sparkline.c), filled style.

GRAPH_COLUMNS: Final = 80
GRAPH_ROWS: Final = 4
_CHARSET_FILL: Final = "_o#"
_LABEL_MARGIN_TOP: Final = 1


def _age_label(elapsed: int) -> str:
    if elapsed < 60:
        return f"{elapsed}s"
    if elapsed < 3600:
        return f"{elapsed // 60}m"
    if elapsed < 86400:
        return f"{elapsed // 3600}h"
    return f"{elapsed // 86400}d"


def sparkline(
    values: list[int], labels: list[str], columns: int = GRAPH_COLUMNS, rows: int = GRAPH_ROWS
) -> str:
    """Render ``values`` as Redis does: ``rows`` lines of ``_o#|``, then vertical labels.

    Sequences longer than ``columns`` are cut into blocks separated by an empty line.
    """
    if not values:
        return ""
    low, high = min(values), max(values)
    has_labels = any(labels)
    out = []
    for start in range(0, len(values), columns):
        if start:
            out.append("\n")
        end = start + columns
        out.append(_render_range(values[start:end], labels[start:end], low, high, rows, has_labels))
    return "".join(out)


def _render_range(
    values: list[int], labels: list[str], low: int, high: int, rows: int, has_labels: bool
) -> str:
    charset_len = len(_CHARSET_FILL)
    relmax = float(high - low) or 1.0
    steps = charset_len * rows
    out = []
    row = 0
    while True:
        chars = [" "] * len(values)
        more = False
        for j, value in enumerate(values):
            if row < rows:
                # C: step = (int)(relval*steps)/relmax, truncated again on assignment.
                step = int(int((value - low) * steps) / relmax)
                step = min(max(step, 0), steps - 1)
                charidx = step - (rows - row - 1) * charset_len
                more = True
                if 0 <= charidx < charset_len:
                    chars[j] = _CHARSET_FILL[charidx]
                elif charidx >= charset_len:
                    chars[j] = "|"
            else:
                if has_labels and row - rows < _LABEL_MARGIN_TOP:
                    more = True  # the blank line between the graph and the labels
                    break
                label = labels[j]
                label_char = row - rows - _LABEL_MARGIN_TOP
                if label and len(label) > label_char:
                    more = True
                    chars[j] = label[label_char]
        if not more:
            break
        row += 1
        out.append("".join(chars) + "\n")
    return "".join(out)


# ----------------------------------------------------------------------
# LATENCY DOCTOR texts.

_DOCTOR_DISABLED: Final = (
    "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Disque "
    'instance. You may use "CONFIG SET latency-monitor-threshold <milliseconds>." in order '
    "to enable it. If we weren't in a deep space mission I'd suggest to take a look at "
    "https://github.com/antirez/disque.\n"
)
_DOCTOR_NOTHING: Final = (
    "Dave, no latency spike was observed during the lifetime of this Disque instance, not "
    "in the slightest bit. I honestly think you ought to sleep tonight.\n"
)
_DOCTOR_INTRO: Final = (
    "Dave, I have observed latency spikes in this Disque instance. You don't mind talking "
    "about it, do you Dave?\n\n"
)
_DOCTOR_NO_ADVICE: Final = (
    "\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please "
    "use the Disque community to get some help, providing this report in your help request.\n"
)
_ADVICE_ORDER: Final = (
    "slowlog_enabled",
    "slowlog_tuning",
    "slowlog_inspect",
    "scheduler",
    "local_disk",
    "ssd",
    "relax_fsync",
    "hz",
    "large_objects",
)
_ADVICE: Final = {
    "slowlog_enabled": (
        "- There are latency issues with potentially slow commands you are using. Try to "
        "enable the Slow Log Disque feature using the command 'CONFIG SET "
        "slowlog-log-slower-than %d'. If the Slow log is disabled Disque is not able to log "
        "slow commands execution for you.\n"
    ),
    "slowlog_tuning": (
        "- Your current Slow Log configuration only logs events that are slower than your "
        "configured latency monitor threshold. Please use 'CONFIG SET "
        "slowlog-log-slower-than %d'.\n"
    ),
    "slowlog_inspect": (
        "- Check your Slow Log to understand what are the commands you are running which are "
        "too slow to execute. Use SLOWLOG GET to see them.\n"
    ),
    "scheduler": (
        "- The system is slow to execute Disque code paths not containing system calls. This "
        "usually means the system does not provide Disque CPU time to run for long periods. "
        "You should try to:\n"
        "  1) Lower the system load.\n"
        "  2) Use a computer / VM just for Disque if you are running other software in the "
        "same system.\n"
        '  3) Check if you have a "noisy neighbour" problem.\n'
    ),
    "local_disk": (
        "- It is strongly advised to use local disks for persistence, especially if you are "
        "using AOF. Remote disks provided by platform-as-a-service providers are known to be "
        "slow.\n"
    ),
    "ssd": (
        "- SSD disks are able to reduce fsync latency, and total time needed for AOF log "
        "rewriting. With extremely high write load SSD disks can be a good option. However "
        "Disque should perform reasonably with high load using normal disks. Use this advice "
        "as a last resort.\n"
    ),
    "relax_fsync": (
        "- Your fsync policy is set to 'always'. It is very hard to get good performances "
        "with such a setup, if possible try to relax the fsync policy to 'everysec'.\n"
    ),
    "hz": (
        "- In order to make the Disque job processing more incremental, try to set the 'hz' "
        "configuration parameter to 100 using 'CONFIG SET hz 100'.\n"
    ),
    "large_objects": (
        "- Adding, deleting or evicting very large jobs, or very many jobs at once, is a "
        "blocking operation. If you have very large job bodies, try to make them smaller.\n"
    ),
}
