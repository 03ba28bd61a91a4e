package text

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClip(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "short", Clip("short", 10))
	assert.Equal(t, "abc…", Clip("abcdef", 3))
	assert.Equal(t, "é…", Clip("éé", 3), "never cuts a rune in two")
	assert.Equal(t, "ab", Clip("a\xffb", 10), "invalid UTF-8 is dropped")
}

func TestRedact(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "bad key [REDACTED] ([REDACTED])", Redact("bad key sk-1 (sk-1)", "sk-1"))
	assert.Equal(t, "nothing to hide", Redact("nothing to hide", ""))
}
