package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/supportflow/supportflow/internal/devenv"
)

const testSearchAttribute = "SupportflowTestenvTest"

func TestMain(m *testing.M) {
	SearchAttributes[testSearchAttribute] = "Keyword"
	os.Exit(Main(m))
}

func TestDatabaseURL(t *testing.T) {
	if os.Getenv("DATABASE_URL") != "" {
		t.Skip("checks the lazily started cluster")
	}
	ctx := context.Background()
	var url1, url2 string
	t.Run("databases", func(t *testing.T) {
		url1, url2 = DatabaseURL(t), DatabaseURL(t)
		assert.NotEqual(t, url1, url2)
		c1, err := pgx.Connect(ctx, url1)
		require.NoError(t, err)
		defer c1.Close(ctx)
		_, err = c1.Exec(ctx, "CREATE TABLE t (id int)")
		require.NoError(t, err, "the database is usable")
		// Left open on purpose: the cleanup must still drop the database.
		c2, err := pgx.Connect(ctx, url2)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c2.Close(ctx) })
	})

	// After the subtest's cleanups both databases are gone from the server.
	conn, err := pgx.Connect(ctx, postgresServer.addr)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, u := range []string{url1, url2} {
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", dbName(t, u)).Scan(&n))
		assert.Zero(t, n, "%s should be dropped", u)
	}
}

func TestDatabaseURLFromEnv(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := devenv.StartPostgres(ctx, devenv.PostgresOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	t.Setenv("DATABASE_URL", pg.URL)

	u := DatabaseURL(t)
	assert.Equal(t, host(t, pg.URL), host(t, u), "the database is on DATABASE_URL's server")
}

func TestPool(t *testing.T) {
	t.Parallel()
	pool := Pool(t)
	var db string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&db))
	assert.Regexp(t, `^sf_[0-9a-f]+$`, db)
}

func TestTemporalAddress(t *testing.T) {
	t.Parallel()
	addr := TemporalAddress(t)
	assert.Equal(t, addr, TemporalAddress(t), "one server per test binary")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort: addr,
		Logger:   sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	require.NoError(t, err)
	defer c.Close()
	if os.Getenv("TEMPORAL_ADDRESS") != "" {
		return
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	require.NoError(t, err)
	assert.Equal(t, enums.INDEXED_VALUE_TYPE_KEYWORD, resp.GetCustomAttributes()[testSearchAttribute])
}

func TestStartFailureIsSticky(t *testing.T) {
	s := &server{name: "broken"}
	calls := 0
	start := func(io.Writer) (string, func() error, error) {
		calls++
		return "", nil, assert.AnError
	}
	for range 2 {
		ft := &fakeTB{TB: t}
		func() {
			defer func() { _ = recover() }()
			s.get(ft, start)
		}()
		assert.Contains(t, ft.fatal, assert.AnError.Error(), "every caller fails with the start error")
		assert.Contains(t, ft.fatal, s.logFile.Name(), "the error names the log file")
	}
	assert.Equal(t, 1, calls, "the server is started once")
	require.NotNil(t, s.logFile)
	t.Cleanup(func() { _ = os.Remove(s.logFile.Name()) })
}

// fakeTB records Fatal instead of failing the real test; it panics to stop
// the caller as Fatal would.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Logf(string, ...any)       {}
func (f *fakeTB) Fatal(args ...any)         { f.fatal = fmt.Sprint(args...); panic(f) }
func (f *fakeTB) Fatalf(s string, a ...any) { f.fatal = fmt.Sprintf(s, a...); panic(f) }

func dbName(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	return p.Path[1:]
}

func host(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	return p.Host
}
