package devenv

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// TemporalCLIVersion is the one place the Temporal CLI (and so the dev
// server) version is pinned. v1.9.1, the newest on the module proxy, cannot
// be built from it: its go.mod replaces github.com/temporalio/cli/cliext
// with a directory that is a module of its own, which the proxy's copy of
// the CLI does not include and the proxy does not serve.
const TemporalCLIVersion = "v1.5.1"

const temporalCLIModule = "github.com/temporalio/cli"

// EnsureTemporalCLI returns the path of a temporal binary of
// TemporalCLIVersion: $TEMPORAL_CLI when set (trusted as is), else the one
// in $GOBIN (or the first $GOPATH/bin) when it is that version, else it
// builds it there with go install, which takes a few minutes the first time.
// Progress lines go to progress (nil discards them) so that a build is never
// silent. Concurrent callers on one machine wait for a single build.
func EnsureTemporalCLI(ctx context.Context, progress io.Writer) (string, error) {
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		return p, nil
	}
	if progress == nil {
		progress = io.Discard
	}
	goBin, err := goInstallDir(ctx)
	if err != nil {
		return "", err
	}
	exe := "temporal"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	target := filepath.Join(goBin, exe)
	if isPinnedTemporal(ctx, target) {
		return target, nil
	}

	// Serialise builds between processes (e.g. test binaries of several
	// packages running at once) so the work is done once.
	unlock, err := lockFile(ctx, filepath.Join(os.TempDir(), "supportflow-temporal-cli.lock"), progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if isPinnedTemporal(ctx, target) {
		return target, nil
	}

	pkg := temporalCLIModule + "/cmd/temporal@" + TemporalCLIVersion
	fmt.Fprintf(progress, "devenv: building Temporal CLI %s into %s (go install %s); this takes a few minutes the first time\n",
		TemporalCLIVersion, goBin, pkg)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install", pkg)
	// Run outside any module or workspace so that only the CLI's own go.mod
	// decides its dependencies.
	cmd.Dir = os.TempDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("devenv: running go install (is go on PATH? or set TEMPORAL_CLI): %w", err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-tick.C:
			fmt.Fprintf(progress, "devenv: still building Temporal CLI… (%s)\n", time.Since(start).Round(time.Second))
		case err = <-waitErr:
			break wait
		}
	}
	if err != nil {
		return "", fmt.Errorf("devenv: go install %s: %w; output:\n%s", pkg, err, strings.TrimSpace(out.String()))
	}
	if !isPinnedTemporal(ctx, target) {
		return "", fmt.Errorf("devenv: go install %s succeeded but %s is not that version", pkg, target)
	}
	fmt.Fprintf(progress, "devenv: Temporal CLI ready at %s (took %s)\n", target, time.Since(start).Round(time.Second))
	return target, nil
}

// goInstallDir is where go install puts binaries: GOBIN, else GOPATH[0]/bin.
func goInstallDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("devenv: go env (is go on PATH? or set TEMPORAL_CLI): %w", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != 2 {
		return "", fmt.Errorf("devenv: unexpected go env output %q", out)
	}
	if gobin := strings.TrimSpace(lines[0]); gobin != "" {
		return gobin, nil
	}
	gopath := filepath.SplitList(strings.TrimSpace(lines[1]))
	if len(gopath) == 0 || gopath[0] == "" {
		return "", errors.New("devenv: neither GOBIN nor GOPATH is set")
	}
	return filepath.Join(gopath[0], "bin"), nil
}

// isPinnedTemporal reports whether path is a temporal CLI of the pinned
// version. A go-installed CLI prints "0.0.0-DEV" for --version, so the
// module version in its build info is checked first; --version is the
// fallback for release binaries, whose version is set at link time.
func isPinnedTemporal(ctx context.Context, path string) bool {
	if info, err := buildinfo.ReadFile(path); err == nil &&
		info.Main.Path == temporalCLIModule && info.Main.Version == TemporalCLIVersion {
		return true
	}
	if _, err := os.Stat(path); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return false
	}
	// e.g. "temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)"
	want := strings.TrimPrefix(TemporalCLIVersion, "v")
	for _, f := range strings.Fields(string(out)) {
		if strings.TrimPrefix(f, "v") == want {
			return true
		}
	}
	return false
}

// lockFile takes an exclusive lock on path, polling so that ctx can cancel
// the wait and telling progress that it is waiting.
func lockFile(ctx context.Context, path string, progress io.Writer) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("devenv: opening lock file: %w", err)
	}
	start := time.Now()
	lastNote := time.Time{}
	for {
		ok, err := tryLock(f)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("devenv: locking %s: %w", path, err)
		}
		if ok {
			// Closing the file releases the lock.
			return func() { _ = f.Close() }, nil
		}
		if time.Since(lastNote) >= 15*time.Second {
			fmt.Fprintf(progress, "devenv: waiting for another process building the Temporal CLI… (%s)\n",
				time.Since(start).Round(time.Second))
			lastNote = time.Now()
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("devenv: waiting for the Temporal CLI build lock: %w", context.Cause(ctx))
		case <-time.After(500 * time.Millisecond):
		}
	}
}
