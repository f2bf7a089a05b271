package benchdoc

import (
	"fmt"
	"slices"
)

// Spread is a figure over repeated runs, as the file publishes it: the
// median of the runs and their range, never the best run.
type Spread struct{ Med, Lo, Hi float64 }

// SpreadOf is the median (of an even count, the mean of the middle two)
// and the range of v; zero for no runs.
func SpreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Sorted(slices.Values(v))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{med, s[0], s[len(s)-1]}
}

// Format writes s as the file does, "1.23 s [1.10–1.40]": each number
// with verb ("%.2f"), unit after the median.
func (s Spread) Format(verb, unit string) string {
	return fmt.Sprintf(verb+"%s ["+verb+"–"+verb+"]", s.Med, unit, s.Lo, s.Hi)
}

// Thousands writes n rounded to a whole number, with thousands separators,
// as the file writes counts: 2,070.
func Thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
