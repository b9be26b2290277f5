"""When a job runs and must finish: one reading of durations, deadlines, schedules, time
zones and ``RUN_DATE``, for the job file, the CLI and ``scoring deploy render`` alike.

- a duration: ``45m``, ``1h30m``, ``90s``;
- a deadline: a duration from the start, a time of day (``01:45``, in the job's time
  zone), or one dated from a day (``2026-11-28+1d 01:45``; in a job file
  ``${RUN_DATE}+1d 01:45``, which a render reads as the run's date);
- a schedule: a CronJob's five fields (or ``@daily`` and its kin), each value in range;
- a time zone: an IANA name;
- ``RUN_DATE``: the day the run starts, in the job's time zone (``scoring run --run-date
  today``, as the pod of a rendered CronJob runs it, whose schedule is in that zone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["Deadline", "daily_start", "parse_deadline", "parse_duration", "run_date",
           "window_seconds", "zone", "check_schedule"]  # fmt: skip

_DURATION = re.compile(r"^\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?\s*$")
#: A time of day, alone or after a day ("2026-11-28", or "${RUN_DATE}") and days after it.
_DEADLINE = re.compile(
    r"^\s*(?:(\d{4}-\d{2}-\d{2}|\$\{?RUN_DATE\}?)\s*(?:\+\s*(\d+)\s*d)?(?:\s+|T))?"
    r"(\d{1,2}):(\d{2})\s*$"
)
_FORMS = "a duration ('75m'), a time of day ('01:45') or a date and time ('${RUN_DATE}+1d 01:45')"
#: A CronJob schedule's fields: name, lowest, highest, and the names it takes.
_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
           ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP",
                             "OCT", "NOV", "DEC")),
           ("day of week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))  # fmt: skip
_MACROS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
_DAILY = re.compile(r"^\s*(\d{1,2}) (\d{1,2}) \* \* \*\s*$")


@dataclass(frozen=True)
class Deadline:
    """A parsed deadline: ``duration`` from the start, or a time of day ``at`` (on
    ``day`` plus ``days``; ``day`` None: the next such time after the start, or, with
    ``run_date``, the run's date)."""

    duration: timedelta | None = None
    at: time | None = None
    day: date | None = None
    days: int = 0
    run_date: bool = False


def parse_duration(text: str) -> timedelta:
    """``"45m"``, ``"1h30m"``, ``"90s"`` as a timedelta."""
    match = _DURATION.match(text)
    if not match or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration like '45m', '1h30m' or '90s'")
    h, m, s = (int(g or 0) for g in match.groups())
    return timedelta(hours=h, minutes=m, seconds=s)


def parse_deadline(text: str) -> Deadline:
    """``text`` as a :class:`Deadline`, or ValueError naming the value and the forms
    (a day that does not exist, 24:00 and 25:99 included)."""
    found = _DEADLINE.match(text)
    if found is None:
        try:
            return Deadline(duration=parse_duration(text))
        except ValueError:
            raise ValueError(f"{text!r} is not a deadline: give {_FORMS}") from None
    day_text, days, hour, minute = found.groups()
    try:
        at = time(int(hour), int(minute))
        day = date.fromisoformat(day_text) if day_text and day_text[0].isdigit() else None
    except ValueError as exc:
        raise ValueError(f"deadline {text.strip()!r}: {exc}; give {_FORMS}") from None
    return Deadline(at=at, day=day, days=int(days or 0), run_date=bool(day_text) and day is None)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or ValueError naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (use an IANA name, e.g. "
                         "'Europe/Berlin')") from None  # fmt: skip


def check_schedule(text: str) -> str:
    """A CronJob schedule, each field in range (ValueError naming the field)."""
    fields = text.split()
    if len(fields) == 1 and fields[0] in _MACROS:
        return text
    if len(fields) != 5:
        raise ValueError(
            f"schedule {text!r} is not a cron schedule: give five fields (minute hour "
            "day-of-month month day-of-week), e.g. '30 0 * * *'"
        )
    for value, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        for part in value.split(","):
            if not _cron_part(part.upper(), low, high, names):
                raise ValueError(f"schedule {text!r}: {name} {part!r} is not a value from "
                                 f"{low} to {high}, a range, a list or a step")  # fmt: skip
    return text


def _cron_part(part: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    span, _, step = part.partition("/")
    if step and not (step.isdigit() and int(step) > 0):
        return False
    if span in ("*", "?"):
        return True
    ends = span.split("-")
    if len(ends) > 2:
        return False
    values = [names.index(e) + (low if names and low else 0) if e in names else
              int(e) if e.isdigit() else None for e in ends]  # fmt: skip
    if any(v is None or not low <= v <= high for v in values):
        return False
    return len(values) == 1 or values[0] <= values[1]  # type: ignore[operator]


def daily_start(schedule: str) -> time | None:
    """The time of day a ``M H * * *`` schedule starts (None for any other)."""
    found = _DAILY.match(schedule)
    if found is None:
        return None
    return time(int(found.group(2)), int(found.group(1)))


def run_date(zone_name: str, *, now: datetime | None = None) -> date:
    """``RUN_DATE`` for a run starting ``now``: its day in the job's time zone."""
    return (now or datetime.now(timezone.utc)).astimezone(zone(zone_name)).date()


def window_seconds(deadline: Deadline, *, start: time, zone_name: str) -> int:
    """Seconds from a daily start at ``start`` to a time-of-day ``deadline``, in the
    job's time zone: the longest over a year of nights (a night that changes the clocks
    is an hour longer or shorter), for a run dated the day it starts."""
    if deadline.at is None:
        raise ValueError("a duration is its own window")
    where = zone(zone_name)
    longest = 0
    for offset in range(0, 366, 1):
        day = date(2026, 1, 1) + timedelta(days=offset)
        began = datetime.combine(day, start, tzinfo=where)
        if deadline.day is None and not deadline.run_date:  # the next such time after it
            end = datetime.combine(day, deadline.at, tzinfo=where)
            end = end if end > began else datetime.combine(day + timedelta(days=1),
                                                           deadline.at, tzinfo=where)  # fmt: skip
        else:
            end = datetime.combine(day + timedelta(days=deadline.days), deadline.at,
                                   tzinfo=where)  # fmt: skip
        elapsed = int((end.astimezone(timezone.utc) - began.astimezone(timezone.utc))
                      .total_seconds())  # fmt: skip
        if elapsed <= 0:
            raise ValueError("comes before the schedule's start on the run's date: add days "
                             "(${RUN_DATE}+1d ...)")  # fmt: skip
        longest = max(longest, elapsed)
    return longest
