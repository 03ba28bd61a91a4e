package deploy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// caddyNode is one line of a Caddyfile (its tokens) and, when the line opens
// a block, the block's lines.
type caddyNode struct {
	tokens   []string
	children []*caddyNode
}

// caddyfile is what the tests need of deploy/caddy/Caddyfile.
type caddyfile struct {
	global *caddyNode
	sites  []caddySite
}

type caddySite struct {
	address   string
	port      uint32
	tls       []string // certificate and key files
	basicAuth []string // files imported into basic_auth
	routes    []caddyRoute
}

// caddyRoute is one handle block: its path matcher ("" for the fallback)
// and what it does.
type caddyRoute struct {
	path, upstream, respond string
}

// parseCaddyfile reads deploy/caddy/Caddyfile. It follows the Caddyfile's
// block rules (an opening brace ends its line, a closing one stands alone:
// https://caddyserver.com/docs/caddyfile/concepts#blocks) and knows the
// directives the file uses; it is not a general parser, and fails on a
// shape it does not know.
func parseCaddyfile(t *testing.T) caddyfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "caddy", "Caddyfile"))
	require.NoError(t, err)
	root := &caddyNode{}
	stack := []*caddyNode{root}
	for i, line := range strings.Split(string(b), "\n") {
		if j := strings.Index(line, "#"); j >= 0 && (j == 0 || line[j-1] == ' ' || line[j-1] == '\t') {
			line = line[:j]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case len(f) == 1 && f[0] == "}":
			require.Greater(t, len(stack), 1, "Caddyfile line %d: unbalanced }", i+1)
			stack = stack[:len(stack)-1]
		case f[len(f)-1] == "{":
			n := &caddyNode{tokens: f[:len(f)-1]}
			top := stack[len(stack)-1]
			top.children = append(top.children, n)
			stack = append(stack, n)
		default:
			top := stack[len(stack)-1]
			top.children = append(top.children, &caddyNode{tokens: f})
		}
	}
	require.Len(t, stack, 1, "Caddyfile: unclosed block")

	var c caddyfile
	for _, n := range root.children {
		if len(n.tokens) == 0 {
			require.Nil(t, c.global, "Caddyfile: two global options blocks")
			c.global = n
			continue
		}
		require.Len(t, n.tokens, 1, "Caddyfile: a site block with more than one address: %q", n.tokens)
		site := caddySite{address: n.tokens[0]}
		i := strings.LastIndex(site.address, ":")
		require.Greater(t, i, 0, "Caddyfile: site %s names no port", site.address)
		port, err := strconv.ParseUint(site.address[i+1:], 10, 16)
		require.NoError(t, err, "Caddyfile: site %s", site.address)
		site.port = uint32(port)
		for _, d := range n.children {
			switch d.tokens[0] {
			case "tls":
				site.tls = d.tokens[1:]
			case "basic_auth":
				for _, u := range d.children {
					require.Equal(t, "import", u.tokens[0], "Caddyfile: %s: basic_auth users must be imported from a secret file", site.address)
					site.basicAuth = append(site.basicAuth, u.tokens[1:]...)
				}
			case "handle":
				r := caddyRoute{}
				if len(d.tokens) > 1 {
					r.path = d.tokens[1]
				}
				require.Len(t, d.children, 1, "Caddyfile: %s: one directive per handle", site.address)
				switch h := d.children[0].tokens; h[0] {
				case "reverse_proxy":
					require.Len(t, h, 2, "Caddyfile: %s: one upstream per reverse_proxy", site.address)
					r.upstream = h[1]
				case "respond":
					r.respond = strings.Join(h[1:], " ")
				default:
					t.Fatalf("Caddyfile: %s: handle with %s", site.address, h[0])
				}
				site.routes = append(site.routes, r)
			default:
				t.Fatalf("Caddyfile: %s: directive %s is not one these tests know", site.address, d.tokens[0])
			}
		}
		c.sites = append(c.sites, site)
	}
	return c
}

// TestCaddy_TLSTermination: the proxy terminates TLS for every site it
// serves, with the certificate from mounted secrets, on the ports compose
// publishes; the Web UI and the codec (one origin) are behind basic auth,
// the API (its own tokens, Zendesk's signatures) is not; every upstream is
// a compose service's exposed port.
func TestCaddy_TLSTermination(t *testing.T) {
	p := project(t)
	proxy := service(t, p, proxyService)
	mounted := secretTargets(proxy)
	c := parseCaddyfile(t)
	require.NotEmpty(t, c.sites)
	assert.NotEmpty(t, env(proxy)["SUPPORTFLOW_HOST"], "the proxy's sites are named by SUPPORTFLOW_HOST")

	published := map[uint32]bool{}
	for _, pc := range proxy.Ports {
		published[pc.Target] = true
	}
	served := map[uint32]bool{}
	for _, site := range c.sites {
		served[site.port] = true
		assert.True(t, strings.HasPrefix(site.address, "{$SUPPORTFLOW_HOST}:"), "site %s: name it by the host the certificate is for", site.address)
		if assert.Len(t, site.tls, 2, "site %s: tls CERT KEY", site.address) {
			for _, f := range site.tls {
				assert.Contains(t, mounted, f, "site %s: %s is not a secret mounted in the proxy", site.address, f)
			}
		}
		var ui, codec bool
		for _, r := range site.routes {
			if r.upstream == "" {
				continue
			}
			svc, port, ok := strings.Cut(r.upstream, ":")
			require.True(t, ok, "site %s: upstream %s names no port", site.address, r.upstream)
			assert.Contains(t, service(t, p, svc).Expose, port, "site %s: %s does not expose %s", site.address, svc, port)
			ui = ui || svc == temporalUIService
			codec = codec || svc == gatewayService
		}
		assert.Equal(t, ui, codec, "site %s: the Web UI and its codec must share one origin (so one login covers both)", site.address)
		if ui {
			require.NotEmpty(t, site.basicAuth, "site %s: the Web UI and the codec need a login", site.address)
			for _, f := range site.basicAuth {
				assert.Contains(t, mounted, f, "site %s: basic_auth users %s are not a mounted secret", site.address, f)
			}
		} else {
			assert.Empty(t, site.basicAuth, "site %s: the API authenticates requests itself", site.address)
		}
	}
	for port := range published {
		assert.True(t, served[port], "the proxy publishes %d but no site serves it", port)
	}
}
