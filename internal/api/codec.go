package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// The codec server: POST /codec/encode and /codec/decode, Temporal's codec
// server protocol (codec.Codec.Handler), for the Web UI and the temporal
// CLI to show payloads in the clear to whoever holds a codec token.
//
// Who gets what:
//   - a request without a valid bearer token from Config.CodecTokens: 401;
//   - a browser request (an Origin header) from an origin not in
//     Config.CodecOrigins: 403, preflight included, so no other page can
//     use a codec token a browser holds;
//   - an X-Namespace other than the worker's namespace: 403 (these keys
//     seal one namespace's payloads);
//   - a body over Config.MaxCodecBody: 413.
//
// Preflights (OPTIONS) from an allowed origin are answered without a token,
// as browsers send none with them. Every request is logged with the token's
// fingerprint (never the token), its origin and namespace: who read, never
// what was read.

// codecAllowHeaders are the request headers the Web UI sends
// (Content-Type, X-Namespace, and Authorization when it passes a token).
const codecAllowHeaders = "Authorization, Content-Type, X-Namespace"

func (s *Server) codec(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin != "" {
		if !slices.Contains(s.cfg.CodecOrigins, origin) {
			problem(w, http.StatusForbidden, "origin-not-allowed", "Origin not allowed",
				fmt.Sprintf("origin %q is not in SUPPORTFLOW_CODEC_CORS_ORIGINS", origin))
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", codecAllowHeaders)
			h.Set("Access-Control-Max-Age", "600")
			// Chrome asks before a page reaches a more private address
			// (https://wicg.github.io/private-network-access/).
			if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
				h.Set("Access-Control-Allow-Private-Network", "true")
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if r.Method == http.MethodOptions {
		w.Header().Set("Allow", "POST, OPTIONS")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	fingerprint, ok := s.codecToken(w, r)
	if !ok {
		return
	}
	if ns := r.Header.Get("X-Namespace"); ns != "" && ns != s.cfg.Namespace {
		problem(w, http.StatusForbidden, "wrong-namespace", "Wrong namespace",
			fmt.Sprintf("this codec server holds the keys of namespace %q, not %q", s.cfg.Namespace, ns))
		return
	}
	s.log.Info("codec request", "path", r.URL.Path, "token", fingerprint, "origin", origin, "namespace", r.Header.Get("X-Namespace"))
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxCodecBody)
	s.cfg.Codec.Handler().ServeHTTP(w, r)
}

// codecToken checks the bearer token against the codec tokens and returns
// its fingerprint (the first 8 hex digits of its SHA-256) for the log.
func (s *Server) codecToken(w http.ResponseWriter, r *http.Request) (string, bool) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="supportflow-codec"`)
		problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "an Authorization: Bearer codec token is required")
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	match := 0
	for _, t := range s.codecTokens {
		match |= subtle.ConstantTimeCompare(sum[:], t[:])
	}
	if match != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="supportflow-codec", error="invalid_token"`)
		problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "the bearer token is not a codec token")
		return "", false
	}
	return hex.EncodeToString(sum[:4]), true
}
