package cron

import (
	"math/bits"
	"slices"
	"strings"
	"testing"
	"time"
)

// utc parses an RFC 3339 time; the tests write every expected instant out in UTC.
func utc(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustParse(t testing.TB, expr, tz string) *Schedule {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, tz, err)
	}
	return s
}

// format renders times as RFC 3339 in UTC, for comparisons that print well.
func format(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		if t.Location() != time.UTC {
			out[i] = "not UTC: " + t.String()
			continue
		}
		out[i] = t.Format(time.RFC3339)
	}
	return out
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		expr, tz string
		want     string // a substring of the error
	}{
		{"", "UTC", "expected 5 fields (minute hour day-of-month month day-of-week), got 0"},
		{"* * * *", "UTC", "got 4"},
		{"0 * * * * *", "UTC", "got 6: there is no seconds or year field"},
		{"* * * * * 2026", "UTC", "got 6"},
		{"@daily", "UTC", `cron: "@daily": macros are not supported`},
		{"@every 5m", "UTC", "macros are not supported"},
		{"60 * * * *", "UTC", `cron: field 1 (minute) "60": value 60 out of range 0-59`},
		{"* 25 * * *", "UTC", `cron: field 2 (hour) "25": value 25 out of range 0-23`},
		{"* 1,25 * * *", "UTC", `cron: field 2 (hour) "1,25": value 25 out of range 0-23`},
		{"* * 0 * *", "UTC", `cron: field 3 (day-of-month) "0": value 0 out of range 1-31`},
		{"* * 32 * *", "UTC", `field 3 (day-of-month) "32": value 32 out of range 1-31`},
		{"* * * 0 *", "UTC", `field 4 (month) "0": value 0 out of range 1-12`},
		{"* * * 13 *", "UTC", `field 4 (month) "13": value 13 out of range 1-12`},
		{"* * * * 8", "UTC", `field 5 (day-of-week) "8": value 8 out of range 0-7`},
		{"99999999999999999999999 * * * *", "UTC", `field 1 (minute) "99999999999999999999999": value 99999999999999999999999 out of range 0-59`},
		{"1,,2 * * * *", "UTC", `field 1 (minute) "1,,2": empty list item`},
		{"* 1, * * *", "UTC", `field 2 (hour) "1,": empty list item`},
		{"* * ,1 * *", "UTC", `field 3 (day-of-month) ",1": empty list item`},
		{"*/0 * * * *", "UTC", `field 1 (minute) "*/0": step 0 out of range 1-59`},
		{"* 1-5/0 * * *", "UTC", `field 2 (hour) "1-5/0": step 0 out of range 1-23`},
		{"*/60 * * * *", "UTC", "step 60 out of range 1-59"},
		{"*/ * * * *", "UTC", `field 1 (minute) "*/": step "": missing number`},
		{"/5 * * * *", "UTC", `field 1 (minute) "/5": item "/5" has no range before its step`},
		{"1/2/3 * * * *", "UTC", `step "2/3": not a number`},
		{"5-1 * * * *", "UTC", `field 1 (minute) "5-1": range "5-1" is reversed`},
		{"* * * DEC-JAN *", "UTC", `field 4 (month) "DEC-JAN": range "DEC-JAN" is reversed`},
		{"* * * * SAT-SUN", "UTC", `field 5 (day-of-week) "SAT-SUN": range "SAT-SUN" is reversed`},
		{"a * * * *", "UTC", `field 1 (minute) "a": value "a": not a number`},
		{"-5 * * * *", "UTC", `field 1 (minute) "-5": value "": missing number`},
		{"+5 * * * *", "UTC", `value "+5": not a number`},
		{"1-2-3 * * * *", "UTC", `value "2-3": not a number`},
		{"*-5 * * * *", "UTC", `value "*": not a number`},
		{"? * * * *", "UTC", `field 1 (minute) "?": value "?": not a number`},
		{"* * L * *", "UTC", `field 3 (day-of-month) "L": value "L": not a number`},
		{"* JAN * * *", "UTC", `field 2 (hour) "JAN": value "JAN": not a number`},
		{"* * * MON *", "UTC", `field 4 (month) "MON": value "MON" is neither a number nor a name (JAN-DEC)`},
		{"* * * * JAN", "UTC", `field 5 (day-of-week) "JAN": value "JAN" is neither a number nor a name (SUN-SAT)`},
		{"* * * * MONDAY", "UTC", `value "MONDAY" is neither a number nor a name`},
		{"* * * * *", "", `cron: timezone "": an IANA timezone name is required`},
		{"* * * * *", "Local", `cron: timezone "Local": an IANA timezone name is required`},
		{"* * * * *", "Mars/Olympus_Mons", `cron: timezone "Mars/Olympus_Mons": unknown IANA timezone`},
		{"* * * * *", "../../etc/passwd", "unknown IANA timezone"},
		{"* 25 * * *", "Local", "field 2 (hour)"}, // the expression is checked first
	}
	for _, c := range cases {
		s, err := Parse(c.expr, c.tz)
		if err == nil {
			t.Errorf("Parse(%q, %q) = %v, want an error containing %q", c.expr, c.tz, s, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q, %q) error %q, want it to contain %q", c.expr, c.tz, err, c.want)
		}
	}
}

// values lists the values a field's bit set matches.
func values(mask uint64) []int {
	var out []int
	for mask != 0 {
		v := bits.TrailingZeros64(mask)
		out = append(out, v)
		mask &^= 1 << v
	}
	return out
}

func seq(lo, hi, step int) []int {
	var out []int
	for v := lo; v <= hi; v += step {
		out = append(out, v)
	}
	return out
}

func TestParseSyntax(t *testing.T) {
	all := func(i int) []int { return seq(fields[i].min, fields[i].max, 1) }
	cases := []struct {
		expr                          string
		minute, hour, dom, month, dow []int
		domStar, dowStar, periodic    bool
	}{
		{"* * * * *", all(0), all(1), all(2), all(3), seq(0, 6, 1), true, true, true},
		{"5 4 3 2 1", []int{5}, []int{4}, []int{3}, []int{2}, []int{1}, false, false, false},
		{"007 00 01 01 00", []int{7}, []int{0}, []int{1}, []int{1}, []int{0}, false, false, false},
		{"1-5 22-23 30-31 11-12 1-5", seq(1, 5, 1), []int{22, 23}, []int{30, 31}, []int{11, 12}, seq(1, 5, 1), false, false, false},
		{"1,3,59 0,12 1,15,31 1,6,12 0,3,6", []int{1, 3, 59}, []int{0, 12}, []int{1, 15, 31}, []int{1, 6, 12}, []int{0, 3, 6}, false, false, false},
		{"*/15 */6 */10 */3 */2", seq(0, 59, 15), seq(0, 23, 6), []int{1, 11, 21, 31}, []int{1, 4, 7, 10}, []int{0, 2, 4, 6}, true, true, true},
		{"10-30/10 9-17/4 1-10/3 2-8/2 1-5/2", []int{10, 20, 30}, []int{9, 13, 17}, []int{1, 4, 7, 10}, []int{2, 4, 6, 8}, []int{1, 3, 5}, false, false, false},
		// a/n runs to the field's maximum, which for the day of week is 7, Sunday: 3/2 is 3,5,7.
		{"7/20 5/6 20/5 10/1 3/2", []int{7, 27, 47}, []int{5, 11, 17, 23}, []int{20, 25, 30}, []int{10, 11, 12}, []int{0, 3, 5}, false, false, false},
		{"0,*/20,45 1-3,20/2 1,2-3,*/15 JAN,mar-May,Nov/1 sun,TUE-thu", []int{0, 20, 40, 45}, []int{1, 2, 3, 20, 22},
			[]int{1, 2, 3, 16, 31}, []int{1, 3, 4, 5, 11, 12}, []int{0, 2, 3, 4}, false, false, false},
		{"0 0 * jan-DEC/3 MON-FRI/2", []int{0}, []int{0}, all(2), []int{1, 4, 7, 10}, []int{1, 3, 5}, true, false, false},
		{"0 0 1 * *", []int{0}, []int{0}, []int{1}, all(3), seq(0, 6, 1), false, true, false},
		// Day of week 7 is Sunday, alone, in a list, a range or a step.
		{"0 0 * * 7", []int{0}, []int{0}, all(2), all(3), []int{0}, true, false, false},
		{"0 0 * * 0,7", []int{0}, []int{0}, all(2), all(3), []int{0}, true, false, false},
		{"0 0 * * 5-7", []int{0}, []int{0}, all(2), all(3), []int{0, 5, 6}, true, false, false},
		{"0 0 * * 6/1", []int{0}, []int{0}, all(2), all(3), []int{0, 6}, true, false, false},
		{"0 0 * * SUN", []int{0}, []int{0}, all(2), all(3), []int{0}, true, false, false},
		// `*` or `*/n` in the minute or the hour field makes a schedule periodic, as in Vixie cron.
		{"*/10 */2 * * *", seq(0, 59, 10), seq(0, 23, 2), all(2), all(3), seq(0, 6, 1), true, true, true},
		{"0 * * * *", []int{0}, all(1), all(2), all(3), seq(0, 6, 1), true, true, true},
		{"* 3 * * *", all(0), []int{3}, all(2), all(3), seq(0, 6, 1), true, true, true},
		{"0-59 * * * *", all(0), all(1), all(2), all(3), seq(0, 6, 1), true, true, true},
		{"*,5 * *,5 * *,1", all(0), all(1), all(2), all(3), seq(0, 6, 1), true, true, true},
		// Blanks other than one space separate fields too.
		{" 1\t2  3 4 5 \n", []int{1}, []int{2}, []int{3}, []int{4}, []int{5}, false, false, false},
	}
	for _, c := range cases {
		s, err := Parse(c.expr, "UTC")
		if err != nil {
			t.Errorf("Parse(%q): %v", c.expr, err)
			continue
		}
		got := [][]int{values(s.minute), values(s.hour), values(s.dom), values(s.month), values(s.dow)}
		want := [][]int{c.minute, c.hour, c.dom, c.month, c.dow}
		for i := range got {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("Parse(%q) field %d (%s) = %v, want %v", c.expr, i+1, fields[i].name, got[i], want[i])
			}
		}
		if s.domStar != c.domStar || s.dowStar != c.dowStar || s.periodic != c.periodic {
			t.Errorf("Parse(%q): domStar %v dowStar %v periodic %v, want %v %v %v", c.expr, s.domStar, s.dowStar, s.periodic,
				c.domStar, c.dowStar, c.periodic)
		}
	}
}

// TestDayOfMonthOrWeek pins Vixie cron's rule: a day matches either restricted day field, or both if one
// begins with `*`. 2026-01-01 is a Thursday.
func TestDayOfMonthOrWeek(t *testing.T) {
	from := utc(t, "2026-01-01T00:00:00Z")
	cases := []struct {
		expr string
		want []string
	}{
		// Both restricted: the 13th (a Tuesday in January) or any Friday.
		{"0 0 13 * FRI", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z", "2026-01-16T00:00:00Z",
			"2026-01-23T00:00:00Z"}},
		{"0 0 13 * 5", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z", "2026-01-16T00:00:00Z",
			"2026-01-23T00:00:00Z"}},
		{"0 0 13 * *", []string{"2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z", "2026-03-13T00:00:00Z", "2026-04-13T00:00:00Z",
			"2026-05-13T00:00:00Z"}},
		{"0 0 * * FRI", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-16T00:00:00Z", "2026-01-23T00:00:00Z",
			"2026-01-30T00:00:00Z"}},
		// A step over `*` still begins with `*`: both must match. Odd days that are Fridays.
		{"0 0 */2 * FRI", []string{"2026-01-09T00:00:00Z", "2026-01-23T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-27T00:00:00Z",
			"2026-03-13T00:00:00Z"}},
		// The 13th on a Sunday, Tuesday, Thursday or Saturday.
		{"0 0 13 * */2", []string{"2026-01-13T00:00:00Z", "2026-06-13T00:00:00Z", "2026-08-13T00:00:00Z", "2026-09-13T00:00:00Z",
			"2026-10-13T00:00:00Z"}},
		// The first of the month or a Sunday (0 and 7 alike), in February only.
		{"0 0 1 2 0", []string{"2026-02-01T00:00:00Z", "2026-02-08T00:00:00Z", "2026-02-15T00:00:00Z", "2026-02-22T00:00:00Z",
			"2027-02-01T00:00:00Z"}},
		{"0 0 1 2 7", []string{"2026-02-01T00:00:00Z", "2026-02-08T00:00:00Z", "2026-02-15T00:00:00Z", "2026-02-22T00:00:00Z",
			"2027-02-01T00:00:00Z"}},
	}
	for _, c := range cases {
		got := format(mustParse(t, c.expr, "UTC").Upcoming(from, 5))
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: Upcoming(%s, 5) = %v, want %v", c.expr, from.Format(time.RFC3339), got, c.want)
		}
	}
}

func TestNext(t *testing.T) {
	cases := []struct {
		expr, tz, from, want string // want "": none within 5 years
	}{
		// Strictly after, at minute granularity: seconds of the start do not matter.
		{"* * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T10:01:00Z"},
		{"* * * * *", "UTC", "2026-05-05T10:00:59Z", "2026-05-05T10:01:00Z"},
		{"0 10 * * *", "UTC", "2026-05-05T09:59:59Z", "2026-05-05T10:00:00Z"},
		{"0 10 * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-06T10:00:00Z"},
		// Across the end of an hour, a day, a month, a year.
		{"* * * * *", "UTC", "2026-12-31T23:59:30Z", "2027-01-01T00:00:00Z"},
		{"59 23 31 12 *", "UTC", "2026-12-31T23:59:00Z", "2027-12-31T23:59:00Z"},
		{"0 0 1 1 *", "UTC", "2026-06-15T12:00:00Z", "2027-01-01T00:00:00Z"},
		{"30 * * * *", "UTC", "2026-01-31T23:45:00Z", "2026-02-01T00:30:00Z"},
		{"0 0 31 * *", "UTC", "2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z"}, // April has no 31st
		{"0 12 * 2 *", "UTC", "2026-02-28T12:00:00Z", "2027-02-01T12:00:00Z"},
		{"15 6 * 1,7 MON", "UTC", "2026-01-27T00:00:00Z", "2026-07-06T06:15:00Z"},
		// Leap years: 2028 is one, 2100 is not, so from 2099 the next 29 February is over 5 years away.
		{"0 12 29 2 *", "UTC", "2026-03-01T00:00:00Z", "2028-02-29T12:00:00Z"},
		{"0 12 29 2 *", "UTC", "2028-02-29T11:59:00Z", "2028-02-29T12:00:00Z"},
		{"0 12 29 2 *", "UTC", "2100-01-01T00:00:00Z", "2104-02-29T12:00:00Z"},
		{"0 12 29 2 *", "UTC", "2099-01-01T00:00:00Z", ""},
		{"0 0 * 2 *", "UTC", "2028-02-28T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"0 0 * 2 *", "UTC", "2027-02-28T00:00:00Z", "2028-02-01T00:00:00Z"},
		// Never: no such day.
		{"0 0 30 2 *", "UTC", "2026-01-01T00:00:00Z", ""},
		{"0 0 31 4,6,9,11 *", "America/New_York", "2026-01-01T00:00:00Z", ""},
		{"* * 30,31 2 *", "Australia/Lord_Howe", "2026-01-01T00:00:00Z", ""},
		// Sparse: 29 February or a Monday in February.
		{"0 0 29 2 1", "UTC", "2026-03-01T00:00:00Z", "2027-02-01T00:00:00Z"},
		// Timezones without daylight saving: 09:00 in Kolkata (+05:30) and Tokyo (+09:00).
		{"0 9 * * *", "Asia/Kolkata", "2026-05-05T03:30:00Z", "2026-05-06T03:30:00Z"},
		{"0 9 * * *", "Asia/Kolkata", "2026-05-05T03:29:00Z", "2026-05-05T03:30:00Z"},
		{"0 0 1 1 *", "Asia/Kolkata", "2026-06-01T00:00:00Z", "2026-12-31T18:30:00Z"},
		{"30 23 * * SUN", "Asia/Tokyo", "2026-05-05T00:00:00Z", "2026-05-10T14:30:00Z"},
		// A day in the location that is another day in UTC.
		{"0 1 * * MON", "Pacific/Auckland", "2026-06-01T00:00:00Z", "2026-06-07T13:00:00Z"},
		{"0 22 * * MON", "America/Los_Angeles", "2026-06-01T00:00:00Z", "2026-06-02T05:00:00Z"},
	}
	for _, c := range cases {
		s := mustParse(t, c.expr, c.tz)
		from := utc(t, c.from)
		got := s.Next(from)
		if c.want == "" {
			if !got.IsZero() {
				t.Errorf("%q in %s: Next(%s) = %s, want none", c.expr, c.tz, c.from, got)
			}
			continue
		}
		if got.Location() != time.UTC || !got.Equal(utc(t, c.want)) {
			t.Errorf("%q in %s: Next(%s) = %s, want %s", c.expr, c.tz, c.from, got, c.want)
		}
		// The same instant in another location, or with a monotonic clock reading, gives the same answer.
		if again := s.Next(from.In(time.FixedZone("X", -7*3600))); !again.Equal(got) {
			t.Errorf("%q in %s: Next of the same instant in another zone = %s, want %s", c.expr, c.tz, again, got)
		}
	}
}

func TestUpcoming(t *testing.T) {
	s := mustParse(t, "*/20 9-17 * * MON-FRI", "UTC")
	from := utc(t, "2026-01-02T16:30:00Z") // a Friday
	want := []string{"2026-01-02T16:40:00Z", "2026-01-02T17:00:00Z", "2026-01-02T17:20:00Z", "2026-01-02T17:40:00Z",
		"2026-01-05T09:00:00Z"}
	if got := format(s.Upcoming(from, 5)); !slices.Equal(got, want) {
		t.Errorf("Upcoming(5) = %v, want %v", got, want)
	}
	if got := format(s.Upcoming(from, 2)); !slices.Equal(got, want[:2]) {
		t.Errorf("Upcoming(2) = %v, want %v", got, want[:2])
	}
	for _, n := range []int{0, -1} {
		if got := s.Upcoming(from, n); len(got) != 0 {
			t.Errorf("Upcoming(%d) = %v, want none", n, got)
		}
	}
	// A schedule that ends: 29 February at most once in the 5 years after each run, so Upcoming stops early.
	leap := mustParse(t, "0 0 29 2 *", "UTC")
	want = []string{"2096-02-29T00:00:00Z"}
	if got := format(leap.Upcoming(utc(t, "2092-03-01T00:00:00Z"), 5)); !slices.Equal(got, want) {
		t.Errorf("leap day Upcoming(5) = %v, want %v", got, want)
	}
	if got := mustParse(t, "0 0 30 2 *", "UTC").Upcoming(from, 5); len(got) != 0 {
		t.Errorf("never: Upcoming(5) = %v, want none", got)
	}
}

func TestBetween(t *testing.T) {
	s := mustParse(t, "0 * * * *", "UTC")
	cases := []struct {
		from, to string
		max      int
		want     []string
	}{
		// (from, to]: the start excluded, the end included.
		{"2026-05-05T10:00:00Z", "2026-05-05T14:00:00Z", 10, []string{"2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z",
			"2026-05-05T13:00:00Z", "2026-05-05T14:00:00Z"}},
		{"2026-05-05T09:59:59Z", "2026-05-05T11:59:59Z", 10, []string{"2026-05-05T10:00:00Z", "2026-05-05T11:00:00Z"}},
		// At most max, the first ones.
		{"2026-05-05T10:00:00Z", "2026-05-05T14:00:00Z", 2, []string{"2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z"}},
		{"2026-05-05T10:00:00Z", "2026-05-05T14:00:00Z", 0, nil},
		{"2026-05-05T10:00:00Z", "2026-05-05T14:00:00Z", -1, nil},
		{"2026-05-05T10:00:00Z", "2026-05-05T10:00:00Z", 10, nil},
		{"2026-05-05T10:00:00Z", "2026-05-05T10:59:59Z", 10, nil},
		{"2026-05-05T14:00:00Z", "2026-05-05T10:00:00Z", 10, nil}, // to before from
		// Across days, beyond the 5 years of a single Next.
		{"2026-12-31T22:30:00Z", "2027-01-01T01:00:00Z", 10, []string{"2026-12-31T23:00:00Z", "2027-01-01T00:00:00Z",
			"2027-01-01T01:00:00Z"}},
	}
	for _, c := range cases {
		got := format(s.Between(utc(t, c.from), utc(t, c.to), c.max))
		if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
			t.Errorf("Between(%s, %s, %d) = %v, want %v", c.from, c.to, c.max, got, c.want)
		}
	}
	// Catching up ten years of a yearly schedule: more than one Next's horizon.
	yearly := mustParse(t, "0 0 1 1 *", "UTC")
	if got := yearly.Between(utc(t, "2020-06-01T00:00:00Z"), utc(t, "2030-06-01T00:00:00Z"), 100); len(got) != 10 ||
		!got[0].Equal(utc(t, "2021-01-01T00:00:00Z")) || !got[9].Equal(utc(t, "2030-01-01T00:00:00Z")) {
		t.Errorf("yearly Between over 10 years = %v", format(got))
	}
}

// TestDaylightSaving pins the rules of the package doc with exact instants: a skipped wall time fires once at
// the end of the gap; a repeated one fires at its first occurrence only, unless minute and hour are both `*`
// or `*/n`. In 2026 New York springs forward on 8 March at 07:00Z (02:00 EST -> 03:00 EDT) and falls back on
// 1 November at 06:00Z (02:00 EDT -> 01:00 EST); London on 29 March at 01:00Z (01:00 GMT -> 02:00 BST) and
// 25 October at 01:00Z (02:00 BST -> 01:00 GMT); Lord Howe Island (+10:30 standard, +11:00 summer) falls
// back half an hour on 4 April at 15:00Z (02:00 -> 01:30 local, 5 April) and springs forward half an hour on
// 3 October at 15:30Z (02:00 -> 02:30 local, 4 October).
func TestDaylightSaving(t *testing.T) {
	cases := []struct {
		name, expr, tz, from string
		want                 []string
	}{
		// New York, spring forward.
		{"daily in the gap runs at its end", "30 2 * * *", "America/New_York", "2026-03-06T12:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"daily at the start of the gap", "0 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
		{"daily after the gap is not moved", "0 3 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z"}},
		{"daily before the gap", "59 1 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T06:59:00Z", "2026-03-09T05:59:00Z"}},
		{"hourly: 02:00 and 03:00 make one run", "0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"hourly at :30: the skipped 02:30 runs at 03:00", "30 * * * *", "America/New_York", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		{"every minute of the gap: one run", "* 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z", "2026-03-09T06:01:00Z"}},
		{"every minute", "* * * * *", "America/New_York", "2026-03-08T06:58:00Z",
			[]string{"2026-03-08T06:59:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:01:00Z"}},
		{"every 15 minutes", "*/15 * * * *", "America/New_York", "2026-03-08T06:30:00Z",
			[]string{"2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"}},
		{"even hours: the skipped hour 2 runs at 03:00", "0 */2 * * *", "America/New_York", "2026-03-08T05:30:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		// New York, fall back: 01:00-01:59 happens at 05:00Z-05:59Z (EDT) and again at 06:00Z-06:59Z (EST).
		{"daily in the repeated hour runs once", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"daily at the repeated hour's start runs once", "0 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-02T06:00:00Z"}},
		{"daily at the end of the repeated hour", "0 2 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T07:00:00Z", "2026-11-02T07:00:00Z"}},
		{"daily from inside the second pass", "30 1 * * *", "America/New_York", "2026-11-01T06:10:00Z",
			[]string{"2026-11-02T06:30:00Z"}},
		{"hourly (hour field *) runs at both 01:00s: elapsed time", "0 * * * *", "America/New_York", "2026-11-01T03:30:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"hourly from inside the second pass", "0 * * * *", "America/New_York", "2026-11-01T06:00:00Z",
			[]string{"2026-11-01T07:00:00Z"}},
		{"every minute of hour 1 (minute field *): both passes", "* 1 * * *", "America/New_York", "2026-11-01T05:58:00Z",
			[]string{"2026-11-01T05:59:00Z", "2026-11-01T06:00:00Z"}},
		{"every minute follows elapsed time", "* * * * *", "America/New_York", "2026-11-01T05:58:00Z",
			[]string{"2026-11-01T05:59:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:01:00Z"}},
		{"every 15 minutes follows elapsed time", "*/15 * * * *", "America/New_York", "2026-11-01T05:30:00Z",
			[]string{"2026-11-01T05:45:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:15:00Z", "2026-11-01T06:30:00Z",
				"2026-11-01T06:45:00Z", "2026-11-01T07:00:00Z"}},
		{"every 30 minutes of odd hours (minute field */30): both passes", "*/30 1-23/2 * * *", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z"}},
		{"every 30 minutes of */1 hours, both passes", "*/30 */1 * * *", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z",
				"2026-11-01T07:00:00Z"}},
		// London.
		{"London daily in the gap", "30 1 * * *", "Europe/London", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"London hourly, spring", "0 * * * *", "Europe/London", "2026-03-28T23:30:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
		{"London every minute, spring", "* * * * *", "Europe/London", "2026-03-29T00:58:00Z",
			[]string{"2026-03-29T00:59:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:01:00Z"}},
		{"London daily in the repeated hour", "30 1 * * *", "Europe/London", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"London hourly, fall", "0 * * * *", "Europe/London", "2026-10-24T22:30:00Z",
			[]string{"2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z"}},
		{"London every minute, fall", "* * * * *", "Europe/London", "2026-10-25T00:58:00Z",
			[]string{"2026-10-25T00:59:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:01:00Z"}},
		// Lord Howe Island: half-hour changes.
		{"Lord Howe in the half-hour gap", "15 2 * * *", "Australia/Lord_Howe", "2026-10-02T12:00:00Z",
			[]string{"2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},
		{"Lord Howe after the half-hour gap", "45 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00Z",
			[]string{"2026-10-03T15:45:00Z", "2026-10-04T15:45:00Z"}},
		{"Lord Howe hourly, spring", "0 * * * *", "Australia/Lord_Howe", "2026-10-03T14:00:00Z",
			[]string{"2026-10-03T14:30:00Z", "2026-10-03T15:30:00Z", "2026-10-03T16:00:00Z", "2026-10-03T17:00:00Z"}},
		{"Lord Howe every minute, spring", "* * * * *", "Australia/Lord_Howe", "2026-10-03T15:28:00Z",
			[]string{"2026-10-03T15:29:00Z", "2026-10-03T15:30:00Z", "2026-10-03T15:31:00Z"}},
		{"Lord Howe daily in the repeated half hour", "45 1 * * *", "Australia/Lord_Howe", "2026-04-03T12:00:00Z",
			[]string{"2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		{"Lord Howe daily before the repeated half hour", "15 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00Z",
			[]string{"2026-04-04T14:15:00Z", "2026-04-05T14:45:00Z"}},
		{"Lord Howe hourly, fall", "30 * * * *", "Australia/Lord_Howe", "2026-04-04T13:00:00Z",
			[]string{"2026-04-04T13:30:00Z", "2026-04-04T14:30:00Z", "2026-04-04T15:00:00Z", "2026-04-04T16:00:00Z"}},
		{"Lord Howe every minute, fall", "* * * * *", "Australia/Lord_Howe", "2026-04-04T14:58:00Z",
			[]string{"2026-04-04T14:59:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:01:00Z"}},
	}
	for _, c := range cases {
		s := mustParse(t, c.expr, c.tz)
		if got := format(s.Upcoming(utc(t, c.from), len(c.want))); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q in %s from %s = %v, want %v", c.name, c.expr, c.tz, c.from, got, c.want)
		}
	}
}

// scan is the reference the search is checked against: every minute instant of (from, to] in turn, with the
// rules of the package doc applied to it directly.
func scan(s *Schedule, from, to time.Time) []time.Time {
	wall := func(x time.Time) time.Time { // wall clock fields as a UTC time
		l := x.In(s.loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	}
	match := func(w time.Time) bool {
		return s.month&(1<<w.Month()) != 0 && s.dayMatches(w.Day(), w.Weekday()) && s.hour&(1<<w.Hour()) != 0 &&
			s.minute&(1<<w.Minute()) != 0
	}
	var out []time.Time
	for x := from.Truncate(time.Minute).Add(time.Minute); !x.After(to); x = x.Add(time.Minute) {
		w := wall(x)
		fire := match(w)
		if fire && !s.periodic {
			// Not if the same wall time was seen in the last 3 hours.
			for y := x.Add(-time.Minute); fire && y.After(x.Add(-3*time.Hour)); y = y.Add(-time.Minute) {
				fire = !wall(y).Equal(w)
			}
		}
		// The end of a gap fires for the skipped wall times.
		for v := wall(x.Add(-time.Minute)).Add(time.Minute); !fire && v.Before(w); v = v.Add(time.Minute) {
			fire = match(v)
		}
		if fire {
			out = append(out, x)
		}
	}
	return out
}

// TestAgainstMinuteScan checks Next against the reference scan over days around each transition.
func TestAgainstMinuteScan(t *testing.T) {
	windows := []struct{ tz, from string }{
		{"America/New_York", "2026-03-07T00:00:00Z"},
		{"America/New_York", "2026-10-31T00:00:00Z"},
		{"Europe/London", "2026-03-28T00:00:00Z"},
		{"Europe/London", "2026-10-24T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-03T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-10-02T00:00:00Z"},
		{"Asia/Kolkata", "2026-12-30T00:00:00Z"},
		{"Pacific/Apia", "2011-12-28T00:00:00Z"}, // Samoa skipped 30 December 2011 whole
	}
	exprs := []string{"* * * * *", "*/15 * * * *", "*/7 */3 * * *", "0 * * * *", "30 * * * *", "30 2 * * *", "30 1 * * *",
		"* 1 * * *", "* 2 * * *", "0,45 1-3 * * *", "15 2 * * *", "*/20 1,2 * * *", "0 0 * * *", "0 12 * * FRI", "0 0 30 * SAT"}
	for _, w := range windows {
		from := utc(t, w.from)
		to := from.Add(72 * time.Hour)
		for _, expr := range exprs {
			s := mustParse(t, expr, w.tz)
			got := s.Between(from, to, 10000)
			if want := scan(s, from, to); !slices.Equal(format(got), format(want)) {
				t.Errorf("%q in %s from %s: Between = %v, scan = %v", expr, w.tz, w.from, format(got), format(want))
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, e := range []string{"* * * * *", "*/15 * * * *", "30 2 * * *", "0 0 29 2 1", "0 0 30 2 *", "1-5/2,7 */3 1,15 JAN-mar sun-SAT",
		"5/10 0-23/4 */2 * 7", "@daily", "0 * * * * *", "1,,2 * * * *", "*/0 * * * *", "5-1 * * * *", "99999999999999999999 * * * *"} {
		f.Add(e, uint8(0), int64(1_780_000_000))
	}
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Apia"}
	f.Fuzz(func(t *testing.T, expr string, zone uint8, unix int64) {
		s, err := Parse(expr, zones[int(zone)%len(zones)])
		if err != nil {
			if s != nil {
				t.Fatalf("Parse(%q) returned a schedule and an error", expr)
			}
			return
		}
		// Any instant from 1900 to 2200.
		from := time.Unix(-2_208_988_800+unix%(300*365*86400), 0).UTC()
		next := s.Next(from)
		if next.IsZero() {
			return
		}
		if !next.After(from) || next.After(from.AddDate(5, 0, 0)) {
			t.Fatalf("%q: Next(%s) = %s, not within (t, t+5 years]", expr, from.UTC(), next)
		}
		if again := s.Next(next); !again.IsZero() && !again.After(next) {
			t.Fatalf("%q: Next(%s) = %s, not after it", expr, next, again)
		}
	})
}

func BenchmarkNext(b *testing.B) {
	cases := []struct{ name, expr, tz string }{
		{"EveryMinute", "* * * * *", "America/New_York"},
		{"Daily", "30 2 * * *", "America/New_York"},
		{"Weekdays", "*/20 9-17 * * MON-FRI", "Europe/London"},
		{"Sparse", "0 0 29 2 1", "Australia/Lord_Howe"},
		{"LeapDay", "0 0 29 2 *", "America/New_York"},
		{"Never", "0 0 30 2 *", "America/New_York"},
	}
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range cases {
		s := mustParse(b, c.expr, c.tz)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				s.Next(from)
			}
		})
	}
}
