// Package cron evaluates the schedules of deployments: 5-field POSIX cron expressions in an IANA timezone,
// to the minute. Stdlib only.
//
// An expression is five fields separated by blanks: minute (0-59), hour (0-23), day of month (1-31), month
// (1-12 or JAN-DEC) and day of week (0-7 or SUN-SAT, 0 and 7 both Sunday). Names are case-insensitive and
// allowed only in their own field. A field is a comma-separated list of items; an item is `*`, a value `a`, a
// range `a-b` (a <= b), or one of these followed by a step `/n` (n >= 1): `*/n`, `a-b/n`, and `a/n`, which
// means `a-max/n`. There is no seconds field and there are no macros (`@daily`): both are refused, as are
// empty list items, step 0, reversed ranges and values out of range.
//
// As in Vixie cron, when both the day-of-month and the day-of-week fields are restricted (neither begins with
// `*`), a day matches if either matches ("0 0 1 * MON": the 1st and every Monday); otherwise both must.
//
// The fields are matched against the wall clock of the schedule's location. Daylight-saving changes make some
// wall times not exist and others happen twice. As in Vixie cron, fixed-time schedules neither lose nor repeat
// a run and periodic ones follow elapsed time; here the rules are exact for any change of offset (an hour, half
// an hour on Lord Howe Island, a whole day in Samoa in 2011):
//
//  1. A wall time that does not exist (skipped by a spring-forward jump) is not lost: the schedule fires at
//     the first instant after the gap, the moment of the jump, if any skipped minute matches. All the skipped
//     minutes that match make one run there, together with the wall time right after the gap if it matches
//     too. "30 2 * * *" in America/New_York runs at 03:00 EDT on the day clocks jump from 02:00 to 03:00, and
//     "* * * * *" runs at 01:59 EST then 03:00 EDT.
//  2. A wall time that happens twice (the hour repeated by a fall-back jump) fires once, at its first
//     occurrence: "30 1 * * *" runs at 01:30 EDT and not again an hour later. The exception are periodic
//     expressions, as in Vixie cron: those whose minute or hour field is `*` or `*/n` ("0 * * * *",
//     "*/15 * * * *", "* 1 * * *") follow elapsed time and fire at every real instant whose wall time matches,
//     in both passes through the repeated hour: an hourly schedule runs every hour, with no two-hour gap.
//
// Times before the first and after the last transition of the timezone database are taken with the offsets
// in force there. A timezone whose offset is not a whole number of minutes (local mean time, before 1900)
// fires on its own wall clock's whole minutes.
package cron

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed expression in a location. It is immutable and safe for concurrent use.
type Schedule struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches (dow: 0-6, Sunday is 0)
	// domStar and dowStar say the day-of-month and day-of-week fields begin with `*`: only if neither does is
	// a day matched by either field rather than both.
	domStar, dowStar bool
	// periodic says the minute or the hour field is `*` or `*/n`: the schedule follows elapsed time
	// through a repeated hour instead of firing at the first occurrence of each wall time only.
	periodic bool
	loc      *time.Location
}

// field is the description of one of the five fields.
type field struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i (months) or i (days); nil: numbers only
}

var fields = [5]field{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day-of-month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}},
	{name: "day-of-week", min: 0, max: 7, names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}},
}

// horizon is how far Next looks: a schedule that matches no time within it (a 30 February) never fires.
const horizonYears = 5

// Parse parses a 5-field expression and loads its IANA timezone. An explicit name is required ("UTC" is
// one); "" and "Local" are refused because the server's own timezone is not the user's. An error names the
// field that is wrong and why.
func Parse(expr, timezone string) (*Schedule, error) {
	s, err := parseExpr(expr)
	if err != nil {
		return nil, err
	}
	if timezone == "" || timezone == "Local" {
		return nil, fmt.Errorf("cron: timezone %q: an IANA timezone name is required, such as \"UTC\" or \"America/New_York\"", timezone)
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil {
		return nil, fmt.Errorf("cron: timezone %q: unknown IANA timezone", timezone)
	}
	s.loc = loc
	return s, nil
}

func parseExpr(expr string) (*Schedule, error) {
	parts := strings.Fields(expr)
	if len(parts) > 0 && strings.HasPrefix(parts[0], "@") {
		return nil, fmt.Errorf("cron: %q: macros are not supported; write the 5 fields (minute hour day-of-month month day-of-week)", parts[0])
	}
	switch {
	case len(parts) == 6:
		return nil, errors.New("cron: expected 5 fields (minute hour day-of-month month day-of-week), got 6: there is no seconds or year field")
	case len(parts) != 5:
		return nil, fmt.Errorf("cron: expected 5 fields (minute hour day-of-month month day-of-week), got %d", len(parts))
	}
	var masks [5]uint64
	for i, p := range parts {
		m, err := fields[i].parse(p)
		if err != nil {
			return nil, fmt.Errorf("cron: field %d (%s) %q: %w", i+1, fields[i].name, p, err)
		}
		masks[i] = m
	}
	// Day of week 7 is Sunday, like 0.
	dow := masks[4]
	if dow&(1<<7) != 0 {
		dow = dow&^(1<<7) | 1
	}
	return &Schedule{
		minute: masks[0], hour: masks[1], dom: masks[2], month: masks[3], dow: dow,
		domStar:  strings.HasPrefix(parts[2], "*"),
		dowStar:  strings.HasPrefix(parts[4], "*"),
		periodic: wholeRange(parts[0]) || wholeRange(parts[1]),
	}, nil
}

// wholeRange reports whether a field is `*` or `*/n`.
func wholeRange(f string) bool {
	return f == "*" || strings.HasPrefix(f, "*/")
}

// parse returns the values a field matches as a bit set.
func (f field) parse(s string) (uint64, error) {
	var mask uint64
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return 0, errors.New("empty list item")
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := number(stepText)
			if err != nil {
				return 0, fmt.Errorf("step %q: %w", stepText, err)
			}
			if n < 1 || n > f.max-f.min {
				return 0, fmt.Errorf("step %s out of range 1-%d", stepText, f.max-f.min)
			}
			step = n
		}
		var lo, hi int
		switch {
		case rng == "*":
			lo, hi = f.min, f.max
		case rng == "":
			return 0, fmt.Errorf("item %q has no range before its step", item)
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = f.value(a); err != nil {
				return 0, err
			}
			hi = lo
			if isRange {
				if hi, err = f.value(b); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("range %q is reversed", rng)
				}
			} else if hasStep {
				hi = f.max // a/n is a-max/n
			}
		}
		for v := lo; v <= hi; v += step {
			mask |= 1 << v
		}
	}
	return mask, nil
}

// value parses one value of the field: a number in range or, in the month and day-of-week fields, a name.
func (f field) value(s string) (int, error) {
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			if f.min == 1 {
				return i + 1, nil
			}
			return i, nil
		}
	}
	n, err := number(s)
	if err != nil {
		if f.names != nil {
			return 0, fmt.Errorf("value %q is neither a number nor a name (%s-%s)", s, f.names[0], f.names[len(f.names)-1])
		}
		return 0, fmt.Errorf("value %q: %w", s, err)
	}
	if n < f.min || n > f.max {
		return 0, fmt.Errorf("value %s out of range %d-%d", s, f.min, f.max)
	}
	return n, nil
}

// number parses a decimal number of ASCII digits, no sign; one too long for an int is returned as a large
// value so the caller's range check refuses it.
func number(s string) (int, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a number")
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return math.MaxInt, nil
	}
	return n, nil
}

// Next returns the first scheduled time strictly after t, in UTC, or the zero time if there is none within 5
// years (e.g. "0 0 30 2 *"). Scheduled times are whole minutes of the location's wall clock, so the seconds of
// t do not matter: t is in effect truncated to the minute.
func (s *Schedule) Next(t time.Time) time.Time {
	t = t.UTC()
	limit := t.AddDate(horizonYears, 0, 0)
	from := t.Add(time.Nanosecond) // the earliest instant that may be returned
	// Walk the timezone's segments of constant offset; in each, wall time is instant plus offset, so the
	// search is over a plain calendar.
	for !from.After(limit) {
		local := from.In(s.loc)
		_, off := local.Zone()
		offset := time.Duration(off) * time.Second
		start, end := local.ZoneBounds()
		start, end = start.UTC(), end.UTC()
		if !start.IsZero() {
			_, prev := start.Add(-time.Nanosecond).In(s.loc).Zone()
			prevOffset := time.Duration(prev) * time.Second
			switch {
			case prevOffset < offset && !start.Before(from):
				// Rule 1: the wall times [start+prev, start+off) were skipped; a match among them fires at start.
				if _, ok := s.nextWall(ceilMinute(start.Add(prevOffset)), start.Add(offset)); ok {
					return start.UTC()
				}
			case prevOffset > offset && !s.periodic:
				// Rule 2: the wall times [start+off, start+prev) happened in the previous segment already.
				if seen := start.Add(prevOffset - offset); from.Before(seen) {
					from = seen
				}
			}
		}
		wallLimit := limit.Add(offset).Add(time.Nanosecond)
		if !end.IsZero() && end.Before(limit) {
			wallLimit = end.Add(offset)
		}
		if from.Before(end) || end.IsZero() {
			if w, ok := s.nextWall(ceilMinute(from.Add(offset)), wallLimit); ok {
				return w.Add(-offset).UTC()
			}
		}
		if end.IsZero() {
			break
		}
		from = end
	}
	return time.Time{}
}

// ceilMinute rounds a UTC time up to a whole minute.
func ceilMinute(t time.Time) time.Time {
	if r := t.Truncate(time.Minute); !r.Equal(t) {
		return r.Add(time.Minute)
	}
	return t
}

// nextWall returns the first wall time at or after w and before limit that the fields match. Wall times are
// represented as UTC times with the wall clock's fields; w is a whole minute. It skips whole months, days and
// hours that cannot match, so a sparse schedule costs little.
func (s *Schedule) nextWall(w, limit time.Time) (time.Time, bool) {
	for w.Before(limit) {
		y, mo, d := w.Date()
		h, mi := w.Hour(), w.Minute()
		if s.month&(1<<mo) == 0 {
			if m, ok := nextBit(s.month, int(mo)+1, 12); ok {
				w = time.Date(y, time.Month(m), 1, 0, 0, 0, 0, time.UTC)
			} else {
				w = time.Date(y+1, time.Month(bits.TrailingZeros64(s.month)), 1, 0, 0, 0, 0, time.UTC)
			}
			continue
		}
		if !s.dayMatches(d, w.Weekday()) {
			w = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if s.hour&(1<<h) == 0 {
			if n, ok := nextBit(s.hour, h+1, 23); ok {
				w = time.Date(y, mo, d, n, 0, 0, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
			}
			continue
		}
		if s.minute&(1<<mi) == 0 {
			if n, ok := nextBit(s.minute, mi+1, 59); ok {
				w = time.Date(y, mo, d, h, n, 0, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
			}
			continue
		}
		return w, true
	}
	return time.Time{}, false
}

// nextBit returns the lowest set bit of mask in [from, last].
func nextBit(mask uint64, from, last int) (int, bool) {
	if from > last {
		return 0, false
	}
	rest := mask >> from << from
	if rest == 0 {
		return 0, false
	}
	n := bits.TrailingZeros64(rest)
	return n, n <= last
}

// dayMatches applies the day-of-month and day-of-week fields with Vixie cron's rule: either if both are
// restricted, both otherwise.
func (s *Schedule) dayMatches(dom int, dow time.Weekday) bool {
	domOK, dowOK := s.dom&(1<<dom) != 0, s.dow&(1<<dow) != 0
	if s.domStar || s.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// Upcoming returns the next n scheduled times after t, in UTC: fewer if the schedule ends within 5 years of
// one of them, none if n <= 0.
func (s *Schedule) Upcoming(t time.Time, n int) []time.Time {
	var out []time.Time
	for range max(n, 0) {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// Between returns the scheduled times in (from, to], in UTC and in order, at most max of them (the first
// ones): the runs missed between two moments, for catching up.
func (s *Schedule) Between(from, to time.Time, max int) []time.Time {
	var out []time.Time
	for t := from; len(out) < max; {
		t = s.Next(t)
		if t.IsZero() || t.After(to) {
			break
		}
		out = append(out, t)
	}
	return out
}
