// Package testenv gives tests real PostgreSQL databases and a real Temporal
// server. A package that uses it should have
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// so that the servers it started lazily are stopped when its tests end.
//
// Servers come from the environment when set (DATABASE_URL,
// TEMPORAL_ADDRESS); otherwise each test binary starts its own on first use,
// the Temporal one by the topology SUPPORTFLOW_TEST_TEMPORAL names: "dev"
// (the default, the CLI's in-memory dev server) or "server" (what compose
// deploys: the Temporal server on PostgreSQL, fresh databases per binary),
// on free loopback ports, so packages tested in parallel do not share state.
// Server output goes to a log file in os.TempDir(), which is kept (and its
// path printed) when a server fails to start or a test fails, and removed
// otherwise.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/supportflow/supportflow/internal/devenv"
)

// SearchAttributes are the custom search attributes (name → type such as
// "Keyword") registered on the Temporal dev server that TemporalAddress
// starts. It is empty by default. Add to it before the first call to
// TemporalAddress, typically in TestMain before calling Main; later changes
// have no effect. It is not used when TEMPORAL_ADDRESS is set.
var SearchAttributes = map[string]string{}

var (
	postgresServer = &server{name: "postgres"}
	temporalServer = &server{name: "temporal"}
)

var errShutDown = errors.New("testenv: servers were already shut down by Main")

// Main runs the tests and then stops the servers they started. Use it as
// os.Exit(testenv.Main(m)) in TestMain; it returns m.Run's exit code.
func Main(m *testing.M) int {
	code := m.Run()
	for _, s := range []*server{temporalServer, postgresServer} {
		s.shutdown(code != 0)
	}
	return code
}

// DatabaseURL returns the URL of a new, empty database for this test, dropped
// when the test ends. The database is created on the server at DATABASE_URL
// when that is set, else on this test binary's own throwaway cluster.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	serverURL := os.Getenv("DATABASE_URL")
	if serverURL == "" {
		serverURL = postgresServer.get(t, startPostgres)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL, drop, err := devenv.CreateDatabase(ctx, serverURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Error(err)
		}
	})
	return dbURL
}

// Pool returns a pgx pool on a new database from DatabaseURL, closed (before
// the database is dropped) when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("testenv: opening pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TemporalAddress returns the host:port of a Temporal frontend with the
// "default" namespace: TEMPORAL_ADDRESS when set, else this test binary's own
// in-memory dev server with SearchAttributes registered, started on first use.
// Tests share the server, so they should use unique workflow IDs and task
// queues.
func TemporalAddress(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("TEMPORAL_ADDRESS"); addr != "" {
		return addr
	}
	return temporalServer.get(t, startTemporal)
}

func startPostgres(log io.Writer) (string, func() error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := devenv.StartPostgres(ctx, devenv.PostgresOptions{Log: log})
	if err != nil {
		return "", nil, err
	}
	return pg.URL, pg.Stop, nil
}

// Topology is the Temporal a test binary starts: SUPPORTFLOW_TEST_TEMPORAL,
// "dev" when unset.
func Topology() string {
	if v := os.Getenv("SUPPORTFLOW_TEST_TEMPORAL"); v != "" {
		return v
	}
	return "dev"
}

func startTemporal(log io.Writer) (string, func() error, error) {
	// Generous: the first run on a machine may build the CLI or the server.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	switch Topology() {
	case "dev":
	case "server":
		pgURL := os.Getenv("DATABASE_URL")
		if pgURL == "" {
			var err error
			if pgURL, err = postgresServer.start(startPostgres); err != nil {
				return "", nil, err
			}
		}
		srv, err := devenv.StartTemporalServer(ctx, devenv.TemporalServerOptions{
			PostgresURL:      pgURL,
			SearchAttributes: maps.Clone(SearchAttributes),
			Log:              log,
			Progress:         os.Stderr,
		})
		if err != nil {
			return "", nil, err
		}
		return srv.Address, srv.Stop, nil
	default:
		return "", nil, fmt.Errorf("testenv: SUPPORTFLOW_TEST_TEMPORAL=%q: want dev or server", Topology())
	}
	tmp, err := devenv.StartTemporal(ctx, devenv.TemporalOptions{
		SearchAttributes: maps.Clone(SearchAttributes),
		Log:              log,
		Progress:         os.Stderr,
	})
	if err != nil {
		return "", nil, err
	}
	return tmp.Address, tmp.Stop, nil
}

// server is one lazily started server per test binary.
type server struct {
	name string
	once sync.Once

	// Set inside once.
	addr    string
	stop    func() error
	err     error
	logFile *os.File
}

// get starts the server on first use and returns its address; if starting
// failed, every caller fails with the same error.
func (s *server) get(t testing.TB, start func(log io.Writer) (string, func() error, error)) string {
	t.Helper()
	addr, err := s.start(start)
	if err != nil {
		if s.logFile != nil {
			t.Logf("testenv: %s server log: %s", s.name, s.logFile.Name())
		}
		t.Fatal(err)
	}
	return addr
}

// start is get without a test: the address, or the error every caller
// gets.
func (s *server) start(start func(log io.Writer) (string, func() error, error)) (string, error) {
	s.once.Do(func() {
		f, err := os.CreateTemp("", "testenv-"+s.name+"-*.log")
		if err != nil {
			s.err = fmt.Errorf("testenv: creating %s log file: %w", s.name, err)
			return
		}
		s.logFile = f
		if s.addr, s.stop, err = start(f); err != nil {
			s.err = fmt.Errorf("testenv: starting %s (log: %s): %w", s.name, f.Name(), err)
		}
	})
	return s.addr, s.err
}

// shutdown stops the server if it was started and removes its log unless
// keepLog is set or something went wrong. Later calls to get fail.
func (s *server) shutdown(keepLog bool) {
	ran := true
	s.once.Do(func() { ran, s.err = false, errShutDown })
	if !ran {
		return
	}
	if s.stop != nil {
		if err := s.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stopping %s: %v\n", s.name, err)
			keepLog = true
		}
	}
	if s.logFile == nil {
		return
	}
	_ = s.logFile.Close()
	if keepLog || s.err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %s server log kept at %s\n", s.name, s.logFile.Name())
		return
	}
	_ = os.Remove(s.logFile.Name())
}
