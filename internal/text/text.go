// Package text holds the one string helper every layer needs: cutting an
// error or a caller's text to a bound before it is stored, logged or sent.
package text

import "strings"

// Clip returns s with invalid UTF-8 removed, cut to at most n bytes (never
// mid-rune) with "…" appended when it was longer.
func Clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
