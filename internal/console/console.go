// Package console is supportflow's supervisor console: a small single-page
// app (index.html, app.js, style.css, embedded in the binary, no build
// step, nothing loaded from elsewhere) that the API serves at /console/.
// It lists the drafts that wait for a person, shows a draft's conversation,
// live progress and proposal, approves or rejects it, and shows what its
// execution did, all through the API with the token the person signs in
// with (docs/console.md).
package console

import (
	"embed"
	"net/http"
	"strings"
)

//go:embed assets/index.html assets/app.js assets/style.css
var assets embed.FS

// ContentSecurityPolicy is the policy every console response carries:
// everything from the console's own origin, no inline script or style, no
// plugins, and framed only by its own origin
// (https://developer.mozilla.org/en-US/docs/Web/HTTP/Headers/Content-Security-Policy).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'"

// files maps a request path under the console to its asset and type.
var files = map[string]struct{ name, contentType string }{
	"/":           {"assets/index.html", "text/html; charset=utf-8"},
	"/index.html": {"assets/index.html", "text/html; charset=utf-8"},
	"/app.js":     {"assets/app.js", "text/javascript; charset=utf-8"},
	"/style.css":  {"assets/style.css", "text/css; charset=utf-8"},
}

// Handler serves the console's assets. It expects the path below the
// console's prefix (mount it with http.StripPrefix("/console", ...)) on a
// "GET" pattern, which also takes HEAD and answers other methods 405:
// "/" is the page, "/app.js" and "/style.css" its script and style,
// anything else 404. The assets hold no secret and need no token; every
// call the page makes to the API carries the signed-in token.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		f, ok := files[r.URL.Path]
		if !ok {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("not found: the console is at /console/\n"))
			return
		}
		b, err := assets.ReadFile(f.name)
		if err != nil {
			http.Error(w, "asset missing", http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", f.contentType)
		// The page is always revalidated, so a deploy's new script is
		// picked up; the script and style are small and also revalidated
		// (no fingerprinted names without a build step).
		h.Set("Cache-Control", "no-cache")
		if strings.HasSuffix(f.name, ".html") {
			h.Set("X-Frame-Options", "SAMEORIGIN")
		}
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(b)
	})
}
