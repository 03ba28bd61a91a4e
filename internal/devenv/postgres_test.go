package devenv

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFreePort(t *testing.T) {
	ports, err := freePorts(3)
	require.NoError(t, err)
	assert.Len(t, ports, 3)
	assert.NotEqual(t, ports[0], ports[1])
	assert.NotEqual(t, ports[1], ports[2])
	assert.NotEqual(t, ports[0], ports[2])

	p, err := FreePort()
	require.NoError(t, err)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	require.NoError(t, err, "the port should still be free")
	_ = l.Close()
}

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("postgres://u:p@h:5/postgres?sslmode=disable", "sf_1")
	require.NoError(t, err)
	assert.Equal(t, "postgres://u:p@h:5/sf_1?sslmode=disable", got)

	got, err = withDatabase("host=h port=5 dbname=postgres", "sf_1")
	require.NoError(t, err)
	assert.Equal(t, "host=h port=5 dbname=postgres dbname=sf_1", got)
}

func TestPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	start := time.Now()
	pg, err := StartPostgres(ctx, PostgresOptions{Log: testLog(t)})
	require.NoError(t, err)
	t.Logf("postgres started in %s at %s", time.Since(start), pg.URL)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = pg.Stop()
		}
	})

	conn := connect(ctx, t, pg.URL)
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync))
	assert.Equal(t, "off", fsync, "a non-durable cluster runs without fsync")

	url1, drop1, err := CreateDatabase(ctx, pg.URL)
	require.NoError(t, err)
	url2, drop2, err := CreateDatabase(ctx, pg.URL)
	require.NoError(t, err)
	assert.NotEqual(t, url1, url2)

	name1, name2 := dbName(t, url1), dbName(t, url2)
	c1 := connect(ctx, t, url1)
	c2 := connect(ctx, t, url2)
	assert.Equal(t, name1, currentDatabase(ctx, t, c1))
	assert.Equal(t, name2, currentDatabase(ctx, t, c2))

	// A table in one database is not visible in the other.
	_, err = c1.Exec(ctx, "CREATE TABLE only_here (id int)")
	require.NoError(t, err)
	var n int
	require.NoError(t, c2.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'").Scan(&n))
	assert.Zero(t, n)

	// c1 is still open: drop must terminate it rather than fail.
	require.NoError(t, drop1(ctx))
	require.NoError(t, c2.Close(ctx))
	require.NoError(t, drop2(ctx))
	for _, name := range []string{name1, name2} {
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
		assert.Zero(t, n, "database %s should be dropped", name)
	}
	require.NoError(t, conn.Close(ctx))

	addr := hostPort(t, pg.URL)
	start = time.Now()
	require.NoError(t, pg.Stop())
	stopped = true
	t.Logf("postgres stopped in %s", time.Since(start))
	assertClosed(t, addr)
	_, err = os.Stat(pg.runDir)
	assert.True(t, os.IsNotExist(err), "the temporary directory should be removed")
	assert.NoError(t, pg.Stop(), "Stop twice is fine")
}

func TestPostgresDataDirKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Not t.TempDir(): when root, the server runs as the postgres user and
	// must be able to reach the directory, and t.TempDir's parents are
	// private to root.
	dir, err := os.MkdirTemp("", "devenv-datadir-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	opts := PostgresOptions{DataDir: dir, Durable: true, Log: testLog(t)}
	pg, err := StartPostgres(ctx, opts)
	require.NoError(t, err)
	conn := connect(ctx, t, pg.URL)
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync))
	assert.Equal(t, "on", fsync, "a durable cluster keeps fsync on")
	_, err = conn.Exec(ctx, "CREATE TABLE kept (id int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, pg.Stop())
	_, err = os.Stat(filepath.Join(dir, "PG_VERSION"))
	require.NoError(t, err, "the data directory should be kept")

	pg, err = StartPostgres(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	conn = connect(ctx, t, pg.URL)
	var id int
	require.NoError(t, conn.QueryRow(ctx, "SELECT id FROM kept").Scan(&id))
	assert.Equal(t, 42, id)
}

func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func currentDatabase(ctx context.Context, t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var name string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&name))
	return name
}

func dbName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return u.Path[1:]
}

func hostPort(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return u.Host
}

// assertClosed checks that nothing accepts connections at addr any more.
func assertClosed(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		t.Errorf("%s still accepts connections after Stop", addr)
	}
}

// testLog sends server output to the test log, which go test shows only for
// failing tests or with -v. Output after the test has ended is dropped, since
// t.Log would panic then.
func testLog(t *testing.T) *tWriter {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return w
}

type tWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Logf("%s", p)
	}
	return len(p), nil
}
