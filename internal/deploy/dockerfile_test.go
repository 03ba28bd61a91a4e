package deploy

import (
	"cmp"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	keyword string   // upper case: FROM, RUN, ...
	args    []string // the rest, split on white space
}

// parseDockerfile reads the instructions of a Dockerfile. It understands
// comments and backslash continuations, which is all this repository's
// Dockerfile uses; it is not a general parser.
func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out     []instruction
		pending string
	)
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			pending += rest + " "
			continue
		}
		full := strings.TrimSpace(pending + line)
		pending = ""
		if f := strings.Fields(full); len(f) > 0 {
			out = append(out, instruction{keyword: strings.ToUpper(f[0]), args: f[1:]})
		}
	}
	return out
}

// stages splits instructions at each FROM.
func stages(ins []instruction) [][]instruction {
	var out [][]instruction
	for _, in := range ins {
		if in.keyword == "FROM" || len(out) == 0 {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], in)
	}
	return out
}

// goMinor is the Go version go.mod's go directive names, as "1.N".
func goMinor(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			parts := strings.Split(strings.TrimSpace(v), ".")
			if len(parts) >= 2 {
				return parts[0] + "." + parts[1]
			}
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

// Where the image carries each program: the worker is its entrypoint; the
// API, the codec gateway and the operators' command replace it
// (docker-compose.yml's entrypoint, the Kubernetes containers' command).
const (
	imageWorkerPath  = "/usr/local/bin/worker"
	imageAPIPath     = "/usr/local/bin/supportflow-api"
	imageGatewayPath = "/usr/local/bin/codec-gateway"
	imageStarterPath = "/usr/local/bin/starter"
)

func TestDockerfileBuildsEveryProgram(t *testing.T) {
	st := stages(parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile")))
	if len(st) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a build stage and a final stage", len(st))
	}

	// The build image's Go must satisfy go.mod: the golang images set
	// GOTOOLCHAIN=local, so an older Go fails the build instead of
	// downloading a newer toolchain.
	build, final := st[0], st[len(st)-1]
	if want := "golang:" + goMinor(t) + "-"; !strings.HasPrefix(fromImage(build), want) {
		t.Errorf("build stage is FROM %s, want %s... to match go.mod", fromImage(build), want)
	}

	var goBuild []string
	var envCGO bool
	for _, in := range build {
		switch in.keyword {
		case "RUN":
			if i := slices.Index(in.args, "go"); i >= 0 && i+1 < len(in.args) && in.args[i+1] == "build" {
				goBuild = in.args
			}
		case "ENV":
			envCGO = envCGO || slices.Contains(in.args, "CGO_ENABLED=0")
		}
	}
	if goBuild == nil {
		t.Fatal("build stage has no RUN ... go build")
	}
	for _, want := range []string{"./worker", "./cmd/supportflow-api", "./cmd/codec-gateway", "./cmd/starter", "-trimpath"} {
		if !slices.Contains(goBuild, want) {
			t.Errorf("go build does not pass %s: %q", want, goBuild)
		}
	}
	if !envCGO && !slices.Contains(goBuild, "CGO_ENABLED=0") {
		t.Errorf("go build does not run with CGO_ENABLED=0 (needed for a static binary): %q", goBuild)
	}

	img := fromImage(final)
	small := strings.HasPrefix(img, "gcr.io/distroless/static") || strings.HasPrefix(img, "debian:bookworm-slim")
	if !small {
		t.Errorf("final stage is FROM %s, want distroless/static or debian:bookworm-slim", img)
	}
	user := ""
	if strings.HasSuffix(img, ":nonroot") {
		user = "nonroot"
	}
	var entrypoint []string
	copied := map[string]bool{} // paths in the final image of files copied from the build stage
	for _, in := range final {
		switch in.keyword {
		case "USER":
			user = strings.Join(in.args, " ")
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			var srcs []string
			for _, a := range in.args {
				if !strings.HasPrefix(a, "--") {
					srcs = append(srcs, a)
				}
			}
			if len(srcs) < 2 {
				continue
			}
			dst := srcs[len(srcs)-1]
			for _, src := range srcs[:len(srcs)-1] {
				if strings.HasSuffix(dst, "/") {
					copied[dst+filepath.Base(src)] = true
				} else {
					copied[dst] = true
				}
			}
		}
	}
	for _, bin := range []string{imageWorkerPath, imageAPIPath, imageGatewayPath, imageStarterPath} {
		if !copied[bin] {
			t.Errorf("the final stage does not put %s in the image (copied: %v)", bin, slices.Sorted(maps.Keys(copied)))
		}
	}
	if user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "0:") || strings.HasPrefix(user, "root:") {
		t.Errorf("final stage runs as %q, want a non-root user", cmp.Or(user, "root"))
	}
	if !strings.Contains(strings.Join(entrypoint, " "), "/usr/local/bin/worker") {
		t.Errorf("final stage ENTRYPOINT %q is not the worker", entrypoint)
	}
	if len(entrypoint) == 0 || !strings.HasPrefix(entrypoint[0], "[") {
		t.Errorf("ENTRYPOINT %q is not exec form; in shell form /bin/sh gets SIGTERM, not the worker", entrypoint)
	}
}

func fromImage(stage []instruction) string {
	if len(stage) == 0 || stage[0].keyword != "FROM" {
		return ""
	}
	for _, a := range stage[0].args {
		if !strings.HasPrefix(a, "--") { // skip --platform=...
			return a
		}
	}
	return ""
}

// dockerignorePatterns are .dockerignore's patterns, comments and blank
// lines dropped.
func dockerignorePatterns(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		patterns = append(patterns, line)
	}
	return patterns
}

// dockerignoreExcludes reports whether .dockerignore keeps path (relative
// to the repository) out of the build context. It follows .dockerignore's
// matching only roughly (a pattern excludes a path that it, or any parent
// directory, matches; a later ! pattern re-includes), which is enough for
// the paths these tests ask about.
func dockerignoreExcludes(t *testing.T, path string) bool {
	t.Helper()
	clean := func(p string) string { return strings.Trim(filepath.Clean(p), "/") }
	excluded := false
	for _, p := range dockerignorePatterns(t) {
		negate := strings.HasPrefix(p, "!")
		p = clean(strings.TrimPrefix(p, "!"))
		for dir := path; dir != "." && dir != "/"; dir = filepath.Dir(dir) {
			if ok, _ := filepath.Match(p, dir); ok {
				excluded = !negate
				break
			}
		}
	}
	return excluded
}

func TestDockerignore(t *testing.T) {
	// Secrets and local state never enter the build context (or a cached
	// layer): the git history, compose's .env, the local run's state in
	// .local/ (its payload keys and Temporal history), and deploy/secrets/.
	for _, path := range []string{".git/config", ".env", ".env.production", ".local/payload-keys", ".local/temporal.db", "deploy/secrets/payload-keys"} {
		if !dockerignoreExcludes(t, path) {
			t.Errorf(".dockerignore does not exclude %s", path)
		}
	}

	// What `go build ./worker ./cmd/...` needs must stay in the context.
	for _, path := range []string{"go.mod", "go.sum", "worker/main.go", "cmd/supportflow-api/main.go", "cmd/codec-gateway/main.go",
		"cmd/starter/main.go", "starter/starter.go",
		"migrations/migrations.go", "internal/config/config.go", "supportflow.go"} {
		if dockerignoreExcludes(t, path) {
			t.Errorf(".dockerignore excludes %s, which the build needs", path)
		}
	}
}
