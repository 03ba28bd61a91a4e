// Package eval scores a drafted reply against the reply a human agent
// actually sent on the same ticket.
//
// The metric is word-overlap F1, the measure question-answering benchmarks
// (SQuAD) use for free text: both replies are lower-cased and split into
// words (runs of letters and digits); precision is the share of the
// draft's words that also occur in the agent's reply, recall the share of
// the agent's words that occur in the draft, each word counted at most as
// often as it occurs in the other reply; the score is their harmonic mean,
// from 0 (nothing in common) to 1 (the same words). Two empty replies score
// 1; one empty reply scores 0. It rewards saying what the agent said, not
// saying it well: use it to compare prompts and models on the same set,
// not as an absolute grade.
package eval

import (
	"strings"
	"unicode"
)

// Score returns the word-overlap F1 of draft against actual.
func Score(draft, actual string) float64 {
	d, a := Words(draft), Words(actual)
	if len(d) == 0 && len(a) == 0 {
		return 1
	}
	if len(d) == 0 || len(a) == 0 {
		return 0
	}
	counts := make(map[string]int, len(a))
	for _, w := range a {
		counts[w]++
	}
	overlap := 0
	for _, w := range d {
		if counts[w] > 0 {
			counts[w]--
			overlap++
		}
	}
	if overlap == 0 {
		return 0
	}
	precision := float64(overlap) / float64(len(d))
	recall := float64(overlap) / float64(len(a))
	return 2 * precision * recall / (precision + recall)
}

// Words lower-cases s and splits it into runs of letters and digits.
func Words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}
