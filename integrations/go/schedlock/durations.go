package schedlock

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Durations as the service reads them: ISO-8601 (PT10M, P1D, PT0.5S), ShedLock's short form (500ms, 30s, 10m, 1h,
// 2d, case-insensitive), or a bare number of milliseconds. ASCII digits only, and the whole text must match: the
// patterns are the server's own, as the Python client's are.
var (
	shortDuration = regexp.MustCompile(`^(?i)([0-9]{1,15})(ms|s|m|h|d)?$`)
	isoDuration   = regexp.MustCompile(`^(?i)P(?:([0-9]{1,9})D)?(?:T(?:([0-9]{1,9})H)?(?:([0-9]{1,12})M)?(?:([0-9]{1,15})(?:[.,]([0-9]{1,9}))?S)?)?$`)
	unitMs        = map[string]int64{"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
)

const (
	// The server's sanity ceiling (its configured maximum, 7 days by default, is checked by the server alone).
	ceilingSeconds = 100_000 * 86_400
	// Python's timedelta ends at 999999999 days: a duration past it is "too large" there, and so here.
	timedeltaMaxDays = 999_999_999
)

// ParseDuration reads a duration as the service does; the error names what ("--at-most: not a duration: ...").
func ParseDuration(text, what string) (time.Duration, error) {
	if m := shortDuration.FindStringSubmatch(text); m != nil {
		count, _ := strconv.ParseInt(m[1], 10, 64)
		unit := strings.ToLower(m[2])
		if unit == "" {
			unit = "ms"
		}
		// count < 10^15 and the unit < 10^8: the product fits an int64 only below ~9.2*10^18, so check first.
		if count > (timedeltaMaxDays+1)*86_400_000/unitMs[unit] {
			return 0, fmt.Errorf("%s: too large", what)
		}
		return fromMillis(count*unitMs[unit], what)
	}
	upper := strings.ToUpper(text)
	if m := isoDuration.FindStringSubmatch(text); m != nil && upper != "P" && upper != "PT" && !strings.HasSuffix(upper, "T") {
		days, hours, minutes, seconds := atoi(m[1]), atoi(m[2]), atoi(m[3]), atoi(m[4])
		fraction := (m[5] + "000000000")[:6]
		micros := atoi(fraction)
		totalSeconds := days*86_400 + hours*3_600 + minutes*60 + seconds // < 1.2*10^15: fits
		if totalSeconds/86_400 > timedeltaMaxDays {
			return 0, fmt.Errorf("%s: too large: %s", what, PyRepr(text))
		}
		if totalSeconds > ceilingSeconds || totalSeconds == ceilingSeconds && micros > 0 {
			return 0, fmt.Errorf("%s: too large", what)
		}
		return time.Duration(totalSeconds)*time.Second + time.Duration(micros)*time.Microsecond, nil
	}
	return 0, fmt.Errorf("%s: not a duration: %s (use e.g. '30s', '10m', '1h' or ISO-8601 'PT10M')", what, PyRepr(text))
}

func fromMillis(ms int64, what string) (time.Duration, error) {
	if ms > ceilingSeconds*1000 {
		return 0, fmt.Errorf("%s: too large", what)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func atoi(digits string) int64 {
	value, _ := strconv.ParseInt(digits, 10, 64)
	return value
}

// FormatDuration is ISO-8601 seconds, e.g. PT90S or PT0.5S: exact to the microsecond, and read by every server.
func FormatDuration(d time.Duration) string {
	micros := d.Microseconds()
	seconds, fraction := micros/1_000_000, micros%1_000_000
	if fraction == 0 {
		return fmt.Sprintf("PT%dS", seconds)
	}
	return strings.TrimRight(fmt.Sprintf("PT%d.%06d", seconds, fraction), "0") + "S"
}

// FormatTime is the API's format, for display: 2026-11-29T03:00:00.000Z.
func FormatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
