package eval

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestScore(t *testing.T) {
	for _, tc := range []struct {
		name, draft, actual string
		want                float64
	}{
		{"identical", "Your plan is cancelled.", "your plan is CANCELLED", 1},
		{"both empty", "", "  ", 1},
		{"draft empty", "", "Your plan is cancelled.", 0},
		{"actual empty", "Hello", "", 0},
		{"disjoint", "hello there", "goodbye now", 0},
		// overlap {plan, cancelled} = 2; precision 2/4, recall 2/3.
		{"partial", "the plan was cancelled", "plan cancelled today", 2 * 0.5 * (2.0 / 3) / (0.5 + 2.0/3)},
		// a repeated word counts only as often as the other reply has it.
		{"repeats are clipped", "yes yes yes", "yes no", 2 * (1.0 / 3) * 0.5 / (1.0/3 + 0.5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, Score(tc.draft, tc.actual), 1e-9)
		})
	}
}

func TestWords(t *testing.T) {
	assert.Equal(t, []string{"it", "s", "3", "99", "café"}, Words("It's $3.99 — café!"))
}
