package codec

import (
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// Gateway forwards codec requests (and their CORS preflights) to the codec
// server at upstream, adding the codec token: it stands where an
// authenticating proxy in front of the Web UI would, for a Web UI without
// sign-in (the local run's, bound to loopback), which sends no token of
// its own. Whoever reaches the gateway reads payloads in the clear, so it
// listens only where the Web UI itself may be reached. It forwards
// /codec/... only; any other path is 404, so the token opens nothing else,
// except GatewayHealthPath, which it answers itself.
func Gateway(upstream *url.URL, token string) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
			if r.In.Method != http.MethodOptions {
				r.Out.Header.Set("Authorization", "Bearer "+token)
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == GatewayHealthPath {
			gatewayHealth(w, r)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/codec/") {
			writeProblem(w, http.StatusNotFound, "not-found", "Not found", "the codec gateway forwards /codec/encode and /codec/decode only")
			return
		}
		proxy.ServeHTTP(w, r)
	})
}

// GatewayHealthPath is the gateway's health check: GET (or HEAD) answers
// 200 "ok" without a token and without calling the upstream, so a probe
// says the gateway serves, not that the API does (the API's own probes
// say that), and a restart of the API does not restart every gateway.
const GatewayHealthPath = "/healthz"

func gatewayHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", GatewayHealthPath+" answers GET and HEAD")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = io.WriteString(w, "ok")
	}
}
