package devenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/supportflow/supportflow/internal/temporalconn"
)

// TemporalServerVersion is the Temporal server the production topology runs
// and the image tag docker-compose.yml deploys (a test in internal/deploy
// keeps the two equal). It is newer than the server inside the pinned CLI
// (TemporalCLIVersion v1.5.1 is server 1.29.1): the newer CLIs cannot be
// built from the module proxy (docs/temporal.md).
const TemporalServerVersion = "v1.32.1"

const temporalServerModule = "go.temporal.io/server"

// TemporalServerOptions configures StartTemporalServer.
type TemporalServerOptions struct {
	// PostgresURL is a PostgreSQL server (any database on it) on which the
	// server's two databases are created, fresh, and dropped at Stop.
	PostgresURL string
	// SearchAttributes are registered on the "default" namespace.
	SearchAttributes map[string]string
	// Log receives the server's output; Progress build progress lines.
	Log, Progress io.Writer
	// TLS, when set, serves the frontend over TLS (mutual TLS with
	// RequireClientAuth), as a secured cluster does.
	TLS *ServerTLS
	// JWKSFile, when set, makes the frontend authorize every call: the
	// default JWT claim mapper reads the bearer token (an API key signed by
	// a key in this JSON Web Key Set file) and its "permissions" claim
	// ("default:admin", "temporal-system:admin"), and the default authorizer
	// refuses calls without one.
	// https://docs.temporal.io/self-hosted-guide/security#authorization
	JWKSFile string
	// Connect is how StartTemporalServer's own client reaches the frontend
	// to register the namespace (its TLS and API key; the address is the
	// server's).
	Connect temporalconn.Settings
}

// ServerTLS is the frontend's TLS: its certificate and key, and with
// RequireClientAuth the CA client certificates must chain to.
// https://docs.temporal.io/self-hosted-guide/security#encryption-in-transit-with-mtls
type ServerTLS struct {
	CertFile, KeyFile, ClientCAFile string
	RequireClientAuth               bool
}

// StartTemporalServer runs the topology docker-compose.yml deploys, on
// this machine: the Temporal server binary (built once from the module
// proxy, TemporalServerVersion) persisting to PostgreSQL, its schemas
// applied with Temporal's own SQL tool to two fresh databases, four history
// shards, the "default" namespace registered and the search attributes
// added. It returns once a client can describe the namespace.
func StartTemporalServer(ctx context.Context, opts TemporalServerOptions) (_ *Temporal, err error) {
	if opts.PostgresURL == "" {
		return nil, errors.New("devenv: StartTemporalServer needs a PostgreSQL URL")
	}
	bin, err := EnsureTemporalServer(ctx, opts.Progress)
	if err != nil {
		return nil, err
	}
	schemas, err := temporalSchemaDir(ctx)
	if err != nil {
		return nil, err
	}
	var drops []func(context.Context) error
	dropAll := func() {
		for _, d := range drops {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = d(dctx)
			cancel()
		}
	}
	defer func() {
		if err != nil {
			dropAll()
		}
	}()
	var dbs [2]*url.URL
	for i, schema := range []string{"temporal", "visibility"} {
		dbURL, drop, err := CreateDatabase(ctx, opts.PostgresURL)
		if err != nil {
			return nil, err
		}
		drops = append(drops, drop)
		if dbs[i], err = url.Parse(dbURL); err != nil {
			return nil, fmt.Errorf("devenv: database URL: %w", err)
		}
		if err := applyTemporalSchema(ctx, filepath.Join(bin, "sql"), dbs[i], filepath.Join(schemas, schema, "versioned"), opts.Log); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "supportflow-temporal-server-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	dyn := filepath.Join(dir, "dynamicconfig.yaml")
	if err := os.WriteFile(dyn, []byte(testDynamicConfig), 0o644); err != nil {
		return nil, err
	}
	ports, err := freeLowPorts(11)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		return nil, err
	}
	var cfg bytes.Buffer
	if err := serverConfig.Execute(&cfg, map[string]any{
		"DefaultAddr": dbHostPort(dbs[0]), "VisibilityAddr": dbHostPort(dbs[1]), "P": ports, "DynamicConfig": dyn,
		"User": dbs[0].User.Username(), "Password": password(dbs[0]),
		"DefaultDB": strings.TrimPrefix(dbs[0].Path, "/"), "VisibilityDB": strings.TrimPrefix(dbs[1].Path, "/"),
		"TLS": opts.TLS, "JWKS": opts.JWKSFile,
		// The server's own system workers reach it through an internal
		// frontend, which neither asks for a client certificate nor
		// authorizes, once the public one does either.
		"Internal": opts.TLS != nil || opts.JWKSFile != "",
	}); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "supportflow.yaml"), cfg.Bytes(), 0o644); err != nil {
		return nil, err
	}
	args := []string{"--root", dir, "--config", "config", "--env", "supportflow", "--allow-no-auth", "start"}
	if opts.TLS != nil || opts.JWKSFile != "" {
		// The internal frontend is not among the services started by
		// default.
		for _, svc := range []string{"frontend", "internal-frontend", "history", "matching", "worker"} {
			args = append(args, "--service", svc)
		}
	}
	cmd := exec.Command(filepath.Join(bin, "server"), args...)
	cmd.Dir = dir
	proc, err := startChild("temporal server", cmd, opts.Log, syscall.SIGKILL, nil)
	if err != nil {
		return nil, err
	}
	t := &Temporal{Address: fmt.Sprintf("127.0.0.1:%d", ports[0]), Namespace: "default", proc: proc}
	t.cleanup = func() {
		dropAll()
		os.RemoveAll(dir)
	}
	if err := setUpNamespace(ctx, t, opts.Connect, opts.SearchAttributes); err != nil {
		_ = proc.stop(syscall.SIGINT, 10*time.Second)
		return nil, err
	}
	return t, nil
}

// dbHostPort is the database URL's host:port, PostgreSQL's port when absent.
func dbHostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func password(u *url.URL) string {
	p, _ := u.User.Password()
	return p
}

// setUpNamespace registers "default" (one day's retention) and the search
// attributes once the frontend answers, as compose's setup job does.
func setUpNamespace(ctx context.Context, t *Temporal, conn temporalconn.Settings, attrs map[string]string) error {
	conn.Address, conn.Namespace = t.Address, "default"
	o := client.Options{Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))}
	if err := conn.Apply(&o); err != nil {
		return err
	}
	var c client.Client
	for {
		var err error
		c, err = client.DialContext(ctx, o)
		if err == nil {
			break
		}
		if t.proc.exited() {
			return fmt.Errorf("devenv: Temporal server exited: %v; last output:\n%s", t.proc.exitError(), t.proc.tail.String())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devenv: Temporal server not reachable before %w: %v; last output:\n%s", context.Cause(ctx), err, t.proc.tail.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer c.Close()
	sa := map[string]enumspb.IndexedValueType{}
	for name, typ := range attrs {
		v, ok := enumspb.IndexedValueType_value["INDEXED_VALUE_TYPE_"+strings.ToUpper(typ)]
		if !ok {
			return fmt.Errorf("devenv: search attribute %s has unknown type %q", name, typ)
		}
		sa[name] = enumspb.IndexedValueType(v)
	}
	step := func(name string, f func(ctx context.Context) error) error {
		for {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := f(actx)
			cancel()
			if err == nil {
				return nil
			}
			if t.proc.exited() {
				return fmt.Errorf("devenv: Temporal server exited during %s: %v; last output:\n%s", name, t.proc.exitError(), t.proc.tail.String())
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("devenv: %s on the Temporal server: %w (before %w)", name, err, context.Cause(ctx))
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	if err := step("registering the namespace", func(ctx context.Context) error {
		_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: "default", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
		var exists *serviceerror.NamespaceAlreadyExists
		if errors.As(err, &exists) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	if len(sa) > 0 {
		if err := step("adding search attributes", func(ctx context.Context) error {
			_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
				Namespace: "default", SearchAttributes: sa})
			var exists *serviceerror.AlreadyExists
			if errors.As(err, &exists) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	return step("describing the namespace", func(ctx context.Context) error { return pingClient(ctx, c, "default") })
}

// EnsureTemporalServer returns a directory holding the server ("server")
// and its SQL tool ("sql") of TemporalServerVersion, building them once
// into the user's cache with go install (a few minutes the first time).
func EnsureTemporalServer(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "supportflow", "temporal-server-"+TemporalServerVersion)
	ready := func() bool {
		return isExecutable(filepath.Join(dir, "server")) && isExecutable(filepath.Join(dir, "sql"))
	}
	if ready() {
		return dir, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(os.TempDir(), "supportflow-temporal-server.lock"), progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if ready() {
		return dir, nil
	}
	fmt.Fprintf(progress, "devenv: building Temporal server %s and its SQL tool into %s; a few minutes the first time\n", TemporalServerVersion, dir)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install",
		temporalServerModule+"/cmd/server@"+TemporalServerVersion,
		temporalServerModule+"/cmd/tools/sql@"+TemporalServerVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("devenv: building Temporal server: %w; output:\n%s", err, strings.TrimSpace(string(out)))
	}
	fmt.Fprintf(progress, "devenv: Temporal server ready (took %s)\n", time.Since(start).Round(time.Second))
	return dir, nil
}

// temporalSchemaDir is the server module's schema/postgresql/v12 directory
// in the module cache.
func temporalSchemaDir(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", temporalServerModule+"@"+TemporalServerVersion)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("devenv: locating Temporal's schemas: %w", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("devenv: locating Temporal's schemas: %s", out)
	}
	return filepath.Join(m.Dir, "schema", "postgresql", "v12"), nil
}

// applyTemporalSchema runs Temporal's SQL tool on one database: the base
// version, then every versioned update.
func applyTemporalSchema(ctx context.Context, tool string, db *url.URL, versioned string, log io.Writer) error {
	port := db.Port()
	if port == "" {
		port = "5432"
	}
	base := []string{"--plugin", "postgres12", "--ep", db.Hostname(), "-p", port, "-u", db.User.Username(),
		"--db", strings.TrimPrefix(db.Path, "/")}
	if p := password(db); p != "" {
		base = append(base, "--pw", p)
	}
	for _, args := range [][]string{{"setup-schema", "-v", "0.0"}, {"update-schema", "-d", versioned}} {
		cmd := exec.CommandContext(ctx, tool, append(append([]string{}, base...), args...)...)
		out, err := cmd.CombinedOutput()
		if log != nil {
			_, _ = log.Write(out)
		}
		if err != nil {
			return fmt.Errorf("devenv: temporal sql tool %s on %s: %w; output:\n%s", args[0], strings.TrimPrefix(db.Path, "/"), err, out)
		}
	}
	return nil
}

// testDynamicConfig is deploy/temporal-dynamicconfig.yaml (what compose
// mounts; a test in internal/deploy keeps the two equal), plus the
// search-attribute cache refresh a test needs to use attributes right
// after adding them.
const testDynamicConfig = DeployedDynamicConfig + `system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
`

// DeployedDynamicConfig is the dynamic config compose deploys, without its
// comments.
const DeployedDynamicConfig = `matching.numTaskqueueReadPartitions:
  - value: 1
matching.numTaskqueueWritePartitions:
  - value: 1
system.enableActivityEagerExecution:
  - value: true
`

// serverConfig is the server's static config: PostgreSQL persistence and
// visibility, four history shards, every service on loopback.
var serverConfig = template.Must(template.New("config").Parse(`log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
      sql:
        pluginName: postgres12
        databaseName: "{{.DefaultDB}}"
        connectAddr: "{{.DefaultAddr}}"
        connectProtocol: tcp
        user: "{{.User}}"
        password: "{{.Password}}"
        maxConns: 20
        maxIdleConns: 20
        maxConnLifetime: 1h
    visibility:
      sql:
        pluginName: postgres12
        databaseName: "{{.VisibilityDB}}"
        connectAddr: "{{.VisibilityAddr}}"
        connectProtocol: tcp
        user: "{{.User}}"
        password: "{{.Password}}"
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: 1h
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
{{- if .TLS}}
  tls:
    frontend:
      server:
        certFile: "{{.TLS.CertFile}}"
        keyFile: "{{.TLS.KeyFile}}"
{{- if .TLS.ClientCAFile}}
        clientCaFiles: ["{{.TLS.ClientCAFile}}"]
{{- end}}
        requireClientAuth: {{.TLS.RequireClientAuth}}
{{- end}}
{{- if .JWKS}}
  authorization:
    authorizer: default
    claimMapper: default
    permissionsClaimName: permissions
    jwtKeyProvider:
      keySourceURIs: ["file://{{.JWKS}}"]
      refreshInterval: 1m
{{- end}}
services:
  frontend:
    rpc:
      grpcPort: {{index .P 0}}
      membershipPort: {{index .P 1}}
      httpPort: {{index .P 2}}
      bindOnIP: 127.0.0.1
{{- if .Internal}}
  internal-frontend:
    rpc:
      grpcPort: {{index .P 9}}
      membershipPort: {{index .P 10}}
      bindOnIP: 127.0.0.1
{{- end}}
  history:
    rpc:
      grpcPort: {{index .P 3}}
      membershipPort: {{index .P 4}}
      bindOnIP: 127.0.0.1
  matching:
    rpc:
      grpcPort: {{index .P 5}}
      membershipPort: {{index .P 6}}
      bindOnIP: 127.0.0.1
  worker:
    rpc:
      grpcPort: {{index .P 7}}
      membershipPort: {{index .P 8}}
      bindOnIP: 127.0.0.1
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: 127.0.0.1:{{index .P 0}}
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: "{{.DynamicConfig}}"
  pollInterval: 10s
`))
