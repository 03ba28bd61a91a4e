// Package text holds the string helpers every layer needs before text is
// stored, logged or sent: cutting it to a bound, and redacting a secret.
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

// Redact replaces every occurrence of secret in s: a server may echo the
// credential it rejected, and that text ends up in errors and logs. An
// empty secret leaves s as it is.
func Redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[REDACTED]")
}
