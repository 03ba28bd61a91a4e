package api

import (
	"fmt"
	"net/http"
	"slices"
)

// The codec server: POST /codec/decode, and POST /codec/encode when
// enabled, Temporal's codec server protocol (codec.Codec.Handler), for the
// Web UI and the temporal CLI to show payloads in the clear to whoever
// holds a codec token.
//
// Who gets what:
//   - a request without a valid bearer token from Config.CodecTokens: 401;
//   - a browser request (an Origin header) from an origin not in
//     Config.CodecOrigins: 403, preflight included, so no other page can
//     use a codec token a browser holds;
//   - an X-Namespace other than the worker's namespace: 403 (these keys
//     seal one namespace's payloads);
//   - a body over Config.MaxCodecBody: 413;
//   - POST /codec/encode unless Config.Codec.AllowEncode
//     (SUPPORTFLOW_CODEC_ALLOW_ENCODE): 403. Displaying histories needs
//     decode only (the Web UI and `temporal workflow show` call
//     {endpoint}/decode); encode would let a codec token seal an input of
//     its holder's choosing for the workers to run
//     (https://docs.temporal.io/codec-server). Decode shows payloads that
//     are not sealed (histories from before payload encryption) as they
//     are.
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
	fingerprint, ok := bearer(w, r, s.codecTokens, "supportflow-codec")
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
