package devenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresSuperuser is the superuser name of every cluster that StartPostgres
// initialises, whichever OS user runs it, so URLs look the same everywhere.
const PostgresSuperuser = "postgres"

// PostgresOptions configures StartPostgres. The zero value starts a fast,
// throwaway cluster on a free port with output discarded.
type PostgresOptions struct {
	// Durable keeps PostgreSQL's crash-safety defaults (for benchmarks).
	// False turns off fsync, synchronous_commit and full_page_writes, which
	// makes tests much faster and is safe only for data nobody needs after
	// a crash.
	Durable bool
	// DataDir is where the cluster lives. "" means a temporary directory
	// that Stop removes: in /dev/shm when that is a tmpfs with room and
	// Durable is false, else in os.TempDir(). Otherwise the directory is
	// created and initialised on first use and kept across runs (for the
	// local run).
	DataDir string
	// Port is the TCP port on 127.0.0.1. 0 means a free port chosen at
	// start.
	Port int
	// MaxConnections is PostgreSQL's max_connections. 0 means 200.
	MaxConnections int
	// Log receives the output of initdb and the server. nil discards it.
	Log io.Writer
}

// Postgres is a running PostgreSQL server started by StartPostgres.
type Postgres struct {
	// URL connects as the superuser to the "postgres" database, e.g.
	// postgres://postgres@127.0.0.1:54321/postgres?sslmode=disable.
	URL string
	// DataDir is the cluster's data directory.
	DataDir string

	proc   *child
	runDir string // socket dir, and the data dir when it is temporary
}

// StartPostgres initialises (if needed) and starts a PostgreSQL server as a
// child process listening on 127.0.0.1 only, and waits until it accepts
// connections or ctx ends. When running as root it runs the server as the
// "postgres" OS user, because PostgreSQL refuses to run as root.
func StartPostgres(ctx context.Context, opts PostgresOptions) (_ *Postgres, err error) {
	bin, err := findPostgresBin()
	if err != nil {
		return nil, err
	}
	runAs, err := postgresRunAs()
	if err != nil {
		return nil, err
	}
	// A throwaway cluster that need not survive a crash may as well live in
	// RAM: start-up and CREATE DATABASE are then several times faster.
	base := ""
	if !opts.Durable && opts.DataDir == "" {
		base = ramTempBase()
	}
	removeStaleRunDirs(base)
	runDir, err := os.MkdirTemp(base, runDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("devenv: creating a temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(runDir)
		}
	}()
	if runAs != nil {
		if err := chown(runDir, runAs); err != nil {
			return nil, fmt.Errorf("devenv: giving %s to the %s user: %w", runDir, runAs.name, err)
		}
	}

	dataDir := filepath.Join(runDir, "data")
	if opts.DataDir == "" {
		if err := initDataDir(ctx, bin, dataDir, runAs, opts.Log); err != nil {
			return nil, err
		}
	} else if dataDir, err = prepareDataDir(ctx, bin, opts.DataDir, runAs, opts.Log); err != nil {
		return nil, err
	}

	maxConns := opts.MaxConnections
	if maxConns == 0 {
		maxConns = 200
	}
	// A port chosen by FreePort can be taken by someone else before the
	// server binds it, so a bind failure is retried with another port.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		args := []string{
			"-D", dataDir,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "port=" + strconv.Itoa(port),
			"-c", "unix_socket_directories=" + runDir,
			"-c", "max_connections=" + strconv.Itoa(maxConns),
		}
		if !opts.Durable {
			args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
		}
		// SIGINT is PostgreSQL's "fast shutdown": the right thing both for
		// Stop and for a parent that died.
		proc, err := startChild("postgres", exec.Command(filepath.Join(bin, "postgres"), args...), opts.Log, syscall.SIGINT, runAs)
		if err != nil {
			return nil, err
		}
		pg := &Postgres{
			URL:     fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", PostgresSuperuser, port),
			DataDir: dataDir,
			proc:    proc,
			runDir:  runDir,
		}
		err = waitPostgres(ctx, pg)
		if err == nil {
			return pg, nil
		}
		_ = proc.stop(syscall.SIGINT, 10*time.Second)
		if opts.Port != 0 || attempt == attempts || !proc.exited() || !isBindError(proc.tail.String()) {
			return nil, err
		}
	}
}

// prepareDataDir creates dir if needed, gives it to runAs and initialises a
// cluster there unless it already holds one. It returns dir made absolute.
func prepareDataDir(ctx context.Context, bin, dir string, runAs *osUser, log io.Writer) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("devenv: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("devenv: creating the data directory: %w", err)
	}
	if runAs != nil {
		if err := chown(dir, runAs); err != nil {
			return "", fmt.Errorf("devenv: giving %s to the %s user: %w", dir, runAs.name, err)
		}
		// The server runs as runAs, which must be able to reach dir.
		if blocked := unsearchableAncestor(dir, runAs); blocked != "" {
			return "", fmt.Errorf("devenv: PostgreSQL runs as the %s OS user (it refuses to run as root), which cannot reach %s: "+
				"%s is not searchable by it; keep the data directory somewhere it can reach, or run as another user", runAs.name, dir, blocked)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return dir, nil
	}
	return dir, initdb(ctx, bin, dir, runAs, log)
}

// waitPostgres polls until the server accepts a connection, it exits, or ctx
// ends.
func waitPostgres(ctx context.Context, pg *Postgres) error {
	var lastErr error
	for {
		if pg.proc.exited() {
			return pg.proc.exitError()
		}
		attemptCtx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(attemptCtx, pg.URL)
		if err == nil {
			err = conn.Ping(attemptCtx)
			_ = conn.Close(attemptCtx)
		}
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("devenv: PostgreSQL did not accept connections before %w (last error: %v); last output:\n%s",
				context.Cause(ctx), lastErr, pg.proc.tail.String())
		case <-pg.proc.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts the server down (fast shutdown, killed if it takes more than
// 15 s) and removes its temporary files; a DataDir given in the options is
// kept. It is safe to call more than once.
func (p *Postgres) Stop() error {
	err := p.proc.stop(syscall.SIGINT, 15*time.Second)
	if rmErr := os.RemoveAll(p.runDir); rmErr != nil && err == nil {
		err = fmt.Errorf("devenv: removing %s: %w", p.runDir, rmErr)
	}
	return err
}

// initdbArgs are the options of every cluster initialised here.
var initdbArgs = []string{
	"--username=" + PostgresSuperuser,
	// initdb's default pg_hba.conf only has local-socket and loopback lines,
	// so trust is limited to this machine.
	"--auth=trust",
	"--encoding=UTF8",
	"--locale=C.UTF-8",
	// Nothing is worth fsyncing before the server has even started.
	"--no-sync",
}

const runDirPrefix = "sf-pg-"

// removeStaleRunDirs deletes, best effort, the temporary directories of
// servers whose parent died without calling Stop (Pdeathsig stops the server
// but cannot remove its files). A directory counts as stale when it is over
// ten minutes old and holds neither a postmaster.pid nor a socket lock file,
// both of which a live server keeps.
func removeStaleRunDirs(base string) {
	if base == "" {
		base = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(base, runDirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		locks, _ := filepath.Glob(filepath.Join(dir, ".s.PGSQL.*.lock"))
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil || len(locks) > 0 {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

func initdb(ctx context.Context, bin, dataDir string, runAs *osUser, log io.Writer) error {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), append([]string{"-D", dataDir}, initdbArgs...)...)
	var out tailBuffer
	out.max = 8 << 10
	w := io.Writer(&out)
	if log != nil {
		w = io.MultiWriter(log, &out)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = sysProcAttr(runAs, 0)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("devenv: initdb %s: %w; output:\n%s", dataDir, err, out.String())
	}
	return nil
}

func isBindError(output string) bool {
	return strings.Contains(output, "could not bind") || strings.Contains(output, "already in use")
}

// findPostgresBin returns the directory holding initdb and postgres: the one
// pg_config reports, else the newest /usr/lib/postgresql/*/bin (Debian's
// layout, not on PATH), else wherever initdb is on PATH.
func findPostgresBin() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	candidates = append(candidates, debianPostgresBins()...)
	if p, err := exec.LookPath("initdb"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", errors.New("devenv: PostgreSQL server binaries (initdb, postgres) not found via pg_config --bindir, " +
		"/usr/lib/postgresql/*/bin or PATH; install Debian's postgresql package: sudo apt-get install postgresql")
}

// debianPostgresBins lists /usr/lib/postgresql/<major>/bin, newest first.
func debianPostgresBins() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int {
		switch ma, mb := major(a), major(b); {
		case ma > mb:
			return -1
		case ma < mb:
			return 1
		}
		return 0
	})
	return dirs
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// postgresRunAs returns the user to run PostgreSQL as: nil (the current
// user) unless we are root, which PostgreSQL refuses to run as.
func postgresRunAs() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("devenv: running as root, which PostgreSQL refuses, and there is no postgres OS user to run it as "+
			"(Debian's postgresql package creates one): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("devenv: postgres OS user: %w", err)
	}
	return &osUser{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

// CreateDatabase creates a database with a unique name (sf_<random hex>) on
// the server at serverURL, which may be a URL or a keyword/value string, and
// returns a connection string for it. drop removes the database, first
// terminating any connections still open to it.
func CreateDatabase(ctx context.Context, serverURL string) (dbURL string, drop func(context.Context) error, err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "sf_" + hex.EncodeToString(b[:])
	if dbURL, err = withDatabase(serverURL, name); err != nil {
		return "", nil, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if err := execOn(ctx, serverURL, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("devenv: creating database %s: %w", name, err)
	}
	drop = func(ctx context.Context) error {
		if err := execOn(ctx, serverURL, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("devenv: dropping database %s: %w", name, err)
		}
		return nil
	}
	return dbURL, drop, nil
}

// execOn runs one statement on a fresh connection; CREATE/DROP DATABASE cannot
// run inside a transaction, and a short-lived connection keeps nothing open.
func execOn(ctx context.Context, connString, sql string) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns connString pointing at database name instead.
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("devenv: parsing database URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	// Keyword/value form: a later dbname overrides an earlier one.
	return strings.TrimSpace(connString) + " dbname=" + name, nil
}

// PostgresCannotReach returns, when PostgreSQL would run as another OS
// user (this process is root), the first directory above dir that the
// user cannot search, so a DataDir under it would fail; "" otherwise.
func PostgresCannotReach(dir string) (string, error) {
	runAs, err := postgresRunAs()
	if err != nil || runAs == nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("devenv: %w", err)
	}
	return unsearchableAncestor(abs, runAs), nil
}
