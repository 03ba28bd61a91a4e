package deploy

import (
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/devenv"
)

// hostEnv stands in for the deployment host's environment: a value for every
// variable docker-compose.yml requires from it. The values are distinctive,
// so a test can tell that a setting came from here and not from the file.
// None is a secret: those are mounted files (TestCompose_Secrets).
var hostEnv = map[string]string{
	"SUPPORTFLOW_HOST":    "support.host.example",
	"ZENDESK_SUBDOMAIN":   "host-subdomain",
	"ZENDESK_EMAIL":       "host-agent@example.com",
	"SUBSCRIPTIONS_URL":   "https://host-subscriptions.example.com",
	"BIGQUERY_PROJECT":    "host-analytics",
	"BIGQUERY_DATASET":    "host_commerce",
	"ZENDESK_API_USER_ID": "900000000001",
}

// The services docker-compose.yml defines.
const (
	postgresService       = "postgres"
	temporalSchemaService = "temporal-schema"
	temporalService       = "temporal"
	setupService          = "temporal-setup"
	schedulesService      = "schedules"
	temporalUIService     = "temporal-ui"
	workerService         = "worker"
	apiService            = "api"
	gatewayService        = "codec-gateway"
	proxyService          = "proxy"
)

// supportflowServices are the services running supportflow's image, with
// the program each runs.
var supportflowServices = map[string]process{
	workerService:    procWorker,
	apiService:       procAPI,
	gatewayService:   procGateway,
	schedulesService: procStarter,
}

// mtlsOverride is the compose file that turns on mutual TLS to Temporal.
var mtlsOverride = filepath.Join("deploy", "compose", "temporal-mtls.yml")

// loadCompose loads, interpolates, validates (against the compose schema
// and for consistency) and normalises docker-compose.yml, followed by the
// given override files (relative to the repository), the way docker
// compose does. Interpolation sees env and nothing else: neither this
// process's environment nor an .env file, so the result does not depend on
// the machine running the test.
func loadCompose(t *testing.T, env map[string]string, overrides ...string) (*types.Project, error) {
	t.Helper()
	var pairs []string
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	files := []string{filepath.Join(repoRoot, "docker-compose.yml")}
	for _, o := range overrides {
		files = append(files, filepath.Join(repoRoot, o))
	}
	opts, err := cli.NewProjectOptions(files, cli.WithEnv(pairs))
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	return opts.LoadProject(t.Context())
}

// project loads docker-compose.yml (and overrides) with hostEnv, failing
// the test if it does not load.
func project(t *testing.T, overrides ...string) *types.Project {
	t.Helper()
	p, err := loadCompose(t, hostEnv, overrides...)
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return s
}

// env returns a service's environment with every variable that has a value;
// a bare name (value taken from the environment at run time) counts as unset.
func env(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// secretTargets maps the path of each secret mounted in s to the secret's
// name (compose mounts a secret at /run/secrets/NAME unless told otherwise).
func secretTargets(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for _, sc := range s.Secrets {
		target := sc.Target
		switch {
		case target == "":
			target = "/run/secrets/" + sc.Source
		case !strings.HasPrefix(target, "/"):
			target = "/run/secrets/" + target
		}
		m[target] = sc.Source
	}
	return m
}

// mountedEnv is a service's environment as its program would see it, with
// each path of a secret mounted in the service replaced by a fixture file
// holding a stand-in for that secret. A variable naming a secret the
// service does not mount keeps its path, which does not exist here, so the
// program's loader fails on it as it would in the container.
func mountedEnv(t *testing.T, s types.ServiceConfig) map[string]string {
	t.Helper()
	e := env(s)
	dir := t.TempDir()
	for target, name := range secretTargets(s) {
		path := writeFixture(t, dir, name)
		for k, v := range e {
			e[k] = strings.ReplaceAll(v, target, path)
		}
	}
	return e
}

// listenPort is the port of a host:port listen address (":8000" -> 8000).
func listenPort(t *testing.T, addr string) uint32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "listen address %q", addr)
	n, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err, "listen address %q", addr)
	return uint32(n)
}

func workerConfig(t *testing.T, p *types.Project) config.Worker {
	t.Helper()
	procWorker.setEnv(t, mountedEnv(t, service(t, p, workerService)))
	cfg, err := config.LoadWorker()
	require.NoError(t, err, "the worker rejects the compose file's environment")
	return cfg
}

func apiConfig(t *testing.T, p *types.Project) config.API {
	t.Helper()
	procAPI.setEnv(t, mountedEnv(t, service(t, p, apiService)))
	cfg, err := config.LoadAPI()
	require.NoError(t, err, "the API rejects the compose file's environment")
	return cfg
}

func gatewayConfig(t *testing.T, p *types.Project) config.Gateway {
	t.Helper()
	procGateway.setEnv(t, mountedEnv(t, service(t, p, gatewayService)))
	cfg, err := config.LoadGateway()
	require.NoError(t, err, "the codec gateway rejects the compose file's environment")
	return cfg
}

func TestCompose_ServicesAndImages(t *testing.T) {
	p := project(t)
	for _, name := range []string{postgresService, temporalSchemaService, temporalService, setupService, schedulesService,
		temporalUIService, workerService, apiService, gatewayService, proxyService} {
		service(t, p, name)
	}
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	// Temporal's images run the server version the production-topology
	// tests run against, so what compose deploys is what was tested.
	server := strings.TrimPrefix(devenv.TemporalServerVersion, "v")
	for name, s := range p.Services {
		if s.Build != nil {
			// supportflow's services build the repository's Dockerfile.
			assert.Contains(t, supportflowServices, name, "%s builds an image but is not a supportflow service", name)
			ctx, err := filepath.Abs(s.Build.Context)
			require.NoError(t, err)
			assert.Equal(t, root, ctx, "%s: build context", name)
			assert.Contains(t, []string{"", "Dockerfile"}, s.Build.Dockerfile, "%s: Dockerfile", name)
			continue
		}
		assert.NotContains(t, supportflowServices, name, "%s must build the repository's image", name)
		repo, tag, ok := strings.Cut(s.Image, ":")
		if !ok || tag == "" || tag == "latest" {
			t.Errorf("%s: image %q is not pinned to a tag", name, s.Image)
		}
		switch repo {
		case "temporalio/server", "temporalio/admin-tools":
			assert.Equal(t, server, tag, "%s: %s, the server the tests run (devenv.TemporalServerVersion)", name, repo)
		case "temporalio/auto-setup":
			t.Errorf("%s: temporalio/auto-setup is deprecated; use temporalio/server with an admin-tools schema step", name)
		}
	}
}

// TestCompose_RequiresHostVariables proves the per-deployment values and the
// secrets without a file variant are required (${VAR:?...}) rather than
// defaulted: the file does not load without them, nor with any one of them
// missing or empty.
func TestCompose_RequiresHostVariables(t *testing.T) {
	if _, err := loadCompose(t, nil); err == nil {
		t.Fatal("docker-compose.yml loads with no host variables; required ones must use ${VAR:?message}")
	}
	for _, name := range slices.Sorted(maps.Keys(hostEnv)) {
		without := maps.Clone(hostEnv)
		delete(without, name)
		empty := maps.Clone(hostEnv)
		empty[name] = ""
		for what, e := range map[string]map[string]string{"unset": without, "empty": empty} {
			_, err := loadCompose(t, e)
			if err == nil {
				t.Errorf("docker-compose.yml loads with %s %s; it must be required with ${%s:?...}", what, name, name)
			} else if !strings.Contains(err.Error(), name) {
				t.Errorf("loading with %s %s: the error does not name it: %v", what, name, err)
			}
		}
	}
}

// TestCompose_Ports: the API and the codec are served on different ports,
// both behind the TLS proxy, which is (with Temporal's loopback-only
// frontend) the only service with a host port.
func TestCompose_Ports(t *testing.T) {
	p := project(t)
	api, gw := apiConfig(t, p), gatewayConfig(t, p)
	apiPort, codecPort := listenPort(t, api.Addr), listenPort(t, gw.Addr)
	assert.NotEqual(t, apiPort, codecPort, "the API and the codec gateway listen on the same port")

	// Each listens where the compose network can reach it, and says so.
	for name, port := range map[string]uint32{apiService: apiPort, gatewayService: codecPort} {
		assert.Contains(t, service(t, p, name).Expose, strconv.Itoa(int(port)), "%s listens on %d but does not expose it", name, port)
	}

	// Published ports: the proxy's two sites and Temporal's frontend on
	// loopback, nothing else, and no host port twice.
	seen := map[string]string{}
	for name, s := range p.Services {
		for _, pc := range s.Ports {
			if pc.Published == "" {
				continue
			}
			key := pc.HostIP + ":" + pc.Published
			if other, dup := seen[key]; dup {
				t.Errorf("%s and %s both publish host port %s", name, other, key)
			}
			seen[key] = name
			switch name {
			case proxyService:
			case temporalService:
				assert.Equal(t, "127.0.0.1", pc.HostIP, "temporal publishes %d beyond loopback", pc.Target)
			default:
				t.Errorf("%s publishes host port %s; only the proxy is reached from outside", name, pc.Published)
			}
		}
	}

	// The proxy: one site per published port, the API on one, the codec
	// on another, with the UI.
	c := parseCaddyfile(t)
	proxy := service(t, p, proxyService)
	published := map[uint32]bool{}
	for _, pc := range proxy.Ports {
		published[pc.Target] = true
	}
	var apiSites, codecSites []uint32
	for _, site := range c.sites {
		assert.True(t, published[site.port], "the proxy serves %s but does not publish port %d", site.address, site.port)
		for _, route := range site.routes {
			switch route.upstream {
			case apiService + ":" + strconv.Itoa(int(apiPort)):
				apiSites = append(apiSites, site.port)
				assert.Equal(t, "", route.path, "%s: the API is routed on a path only", site.address)
			case gatewayService + ":" + strconv.Itoa(int(codecPort)):
				codecSites = append(codecSites, site.port)
				assert.Equal(t, "/codec/*", route.path, "%s: the codec gateway must serve /codec/* only", site.address)
			}
		}
	}
	require.Len(t, apiSites, 1, "one proxy site forwards to the API")
	require.Len(t, codecSites, 1, "one proxy site forwards to the codec gateway")
	assert.NotEqual(t, apiSites[0], codecSites[0], "the API and the codec share the proxy port %d", apiSites[0])
	for _, site := range c.sites {
		if site.port != apiSites[0] {
			continue
		}
		i := slices.IndexFunc(site.routes, func(r caddyRoute) bool { return r.path == "/codec/*" })
		if assert.GreaterOrEqual(t, i, 0, "the API's site must refuse /codec/* (the API serves its codec there)") {
			assert.Equal(t, "404", site.routes[i].respond, "the API's site must answer /codec/* with 404")
		}
	}

	// The Web UI decodes through the codec site, on its own origin, and
	// the API admits that origin.
	ui := env(service(t, p, temporalUIService))
	endpoint, err := url.Parse(ui["TEMPORAL_CODEC_ENDPOINT"])
	require.NoError(t, err)
	assert.Equal(t, "https", endpoint.Scheme)
	assert.Equal(t, hostEnv["SUPPORTFLOW_HOST"], endpoint.Hostname())
	assert.Equal(t, strconv.Itoa(int(codecSites[0])), endpoint.Port(), "the UI's codec endpoint is the codec site")
	assert.Equal(t, "/codec", endpoint.Path, "the UI posts to {endpoint}/decode")
	assert.Contains(t, api.CodecOrigins, "https://"+endpoint.Host, "the API must admit the UI's origin")
	assert.Equal(t, "http://"+apiService+":"+strconv.Itoa(int(apiPort)), gw.Upstream.String(), "the gateway forwards to the API")
	assert.Contains(t, api.CodecTokens, gw.Token, "the API accepts the gateway's token")
}

// TestCompose_Secrets: secrets reach supportflow's programs as mounted files
// through their *_FILE variables wherever config has one; the others come
// from the host's environment, and none is written in the file.
func TestCompose_Secrets(t *testing.T) {
	for _, overrides := range [][]string{nil, {mtlsOverride}} {
		p := project(t, overrides...)
		for name, proc := range supportflowServices {
			s := service(t, p, name)
			targets := secretTargets(s)
			e := env(s)
			checkSecretVars(t, name, proc, e, func(v, value string) bool {
				if v == "DATABASE_URL" {
					// The password is not in the URL; pgx reads it from the
					// pgpass file the URL's passfile parameter names.
					u, err := url.Parse(value)
					if err != nil {
						return false
					}
					_, hasPassword := u.User.Password()
					_, mounted := targets[u.Query().Get("passfile")]
					return !hasPassword && mounted
				}
				return value == hostEnv[v]
			})
			for v, value := range e {
				if strings.HasSuffix(v, "_FILE") || strings.HasSuffix(v, "_PATH") || v == "GOOGLE_APPLICATION_CREDENTIALS" {
					_, mounted := targets[value]
					assert.True(t, mounted, "%s: %s=%s is not a secret mounted in the service", name, v, value)
				}
			}
		}
		for name, sc := range p.Secrets {
			assert.Empty(t, sc.Environment, "secret %s comes from an environment variable; use a file in deploy/secrets/", name)
			rel, err := filepath.Rel(mustAbs(t, filepath.Join(repoRoot, "deploy", "secrets")), sc.File)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("secret %s is read from %s, outside deploy/secrets/", name, sc.File)
			}
		}
	}

	// deploy/secrets/ never reaches git or the image.
	ignore, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "secrets", ".gitignore"))
	require.NoError(t, err)
	assert.Equal(t, "*", firstPattern(string(ignore)), "deploy/secrets/.gitignore must ignore everything first")
	assert.True(t, dockerignoreExcludes(t, "deploy/secrets/payload-keys"), ".dockerignore must exclude deploy/secrets/")

	// PostgreSQL's superuser and Temporal's role passwords come from
	// mounted files too, not from variables.
	p := project(t)
	pg := service(t, p, postgresService)
	_, mounted := secretTargets(pg)[env(pg)["POSTGRES_PASSWORD_FILE"]]
	assert.True(t, mounted, "postgres: POSTGRES_PASSWORD_FILE must name a mounted secret")
	assert.NotContains(t, env(pg), "POSTGRES_PASSWORD")
	temporal := service(t, p, temporalService)
	assert.NotContains(t, env(temporal), "POSTGRES_PWD", "temporal: the database password must not be a compose variable")
	entry := strings.Join(temporal.Entrypoint, " ")
	assert.Contains(t, entry, "POSTGRES_PWD=", "temporal: the entrypoint must set POSTGRES_PWD from the secret")
	assertReadsMountedSecret(t, temporalService, entry, temporal)
}

// assertReadsMountedSecret checks that every /run/secrets/ path in text is
// a secret mounted in s.
func assertReadsMountedSecret(t *testing.T, what, text string, s types.ServiceConfig) {
	t.Helper()
	paths := regexp.MustCompile(`/run/secrets/[A-Za-z0-9._-]+`).FindAllString(text, -1)
	assert.NotEmpty(t, paths, "%s reads no secret", what)
	for _, path := range paths {
		_, mounted := secretTargets(s)[path]
		assert.True(t, mounted, "%s reads %s, which is not mounted in %s", what, path, s.Name)
	}
}

// TestCompose_DatabaseRoles: Temporal and supportflow connect as different
// PostgreSQL roles, each owning its own databases, created from the same
// secrets the services use.
func TestCompose_DatabaseRoles(t *testing.T) {
	p := project(t)
	w, a := workerConfig(t, p), apiConfig(t, p)
	roles := map[string]string{} // database -> the role that uses it
	for what, dsn := range map[string]string{"worker": w.DatabaseURL, "api": a.DatabaseURL} {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		assert.Equal(t, postgresService, u.Hostname(), "%s: DATABASE_URL host", what)
		roles[strings.TrimPrefix(u.Path, "/")] = u.User.Username()
	}
	require.Len(t, roles, 1, "the worker and the API use one database")

	temporal := env(service(t, p, temporalService))
	schema := env(service(t, p, temporalSchemaService))
	assert.Equal(t, temporal["POSTGRES_USER"], schema["POSTGRES_USER"], "the schema step and the server use one role")
	for _, db := range []string{temporal["DBNAME"], temporal["VISIBILITY_DBNAME"]} {
		require.NotEmpty(t, db)
		_, shared := roles[db]
		assert.False(t, shared, "Temporal's database %s is supportflow's too", db)
		roles[db] = temporal["POSTGRES_USER"]
	}
	superuser := env(service(t, p, postgresService))["POSTGRES_USER"]
	sfRole := roles["supportflow"]
	assert.NotEqual(t, sfRole, temporal["POSTGRES_USER"], "Temporal and supportflow must use different roles")
	assert.NotEqual(t, superuser, sfRole, "supportflow must not connect as the superuser")
	assert.NotEqual(t, superuser, temporal["POSTGRES_USER"], "Temporal must not connect as the superuser")

	// The init script, mounted where the image runs it, creates each role
	// and its databases, owned by it and closed to everyone else.
	pg := service(t, p, postgresService)
	var initdb string
	for _, v := range pg.Volumes {
		if v.Target == "/docker-entrypoint-initdb.d" {
			initdb = v.Source
			assert.True(t, v.ReadOnly)
		}
	}
	require.Equal(t, mustAbs(t, filepath.Join(repoRoot, "deploy", "postgres", "initdb")), initdb, "postgres: the init scripts' mount")
	script, err := os.ReadFile(filepath.Join(initdb, "10-roles.sh"))
	require.NoError(t, err)
	sql := string(script)
	for db, role := range roles {
		assert.Regexp(t, `(?m)^CREATE ROLE `+regexp.QuoteMeta(role)+` LOGIN PASSWORD`, sql, "the init script does not create the role %s", role)
		assert.Regexp(t, `(?m)^CREATE DATABASE `+regexp.QuoteMeta(db)+` OWNER `+regexp.QuoteMeta(role)+`;`, sql, "the init script does not create %s owned by %s", db, role)
		assert.Regexp(t, `(?m)^REVOKE CONNECT ON DATABASE .*\b`+regexp.QuoteMeta(db)+`\b.* FROM PUBLIC;`, sql, "the init script leaves %s open to other roles", db)
	}
	assertReadsMountedSecret(t, "10-roles.sh", sql, pg)
	// The role's password comes from the pgpass file the services read.
	assert.Contains(t, secretTargets(pg), "/run/secrets/supportflow.pgpass")
	assert.Contains(t, secretTargets(service(t, p, workerService)), "/run/secrets/supportflow.pgpass")
}

// TestCompose_SetupSteps: the one-shot steps run in order (schema, server,
// namespace and search attributes, schedules), each safe to repeat, and
// supportflow starts only after the search attributes exist.
func TestCompose_SetupSteps(t *testing.T) {
	p := project(t)
	dependsOn := func(from, to, cond string) {
		t.Helper()
		d, ok := service(t, p, from).DependsOn[to]
		if assert.True(t, ok, "%s does not depend on %s", from, to) {
			assert.Equal(t, cond, d.Condition, "%s depends on %s", from, to)
		}
	}
	dependsOn(temporalSchemaService, postgresService, types.ServiceConditionHealthy)
	dependsOn(temporalService, temporalSchemaService, types.ServiceConditionCompletedSuccessfully)
	dependsOn(setupService, temporalService, types.ServiceConditionHealthy)
	dependsOn(schedulesService, setupService, types.ServiceConditionCompletedSuccessfully)
	for _, s := range []string{workerService, apiService} {
		dependsOn(s, postgresService, types.ServiceConditionHealthy)
		dependsOn(s, setupService, types.ServiceConditionCompletedSuccessfully)
	}
	for _, s := range []string{temporalSchemaService, setupService, schedulesService} {
		assert.Equal(t, "no", service(t, p, s).Restart, "%s is a one-shot step", s)
	}

	// The schema step migrates both of Temporal's databases.
	schema := service(t, p, temporalSchemaService)
	script := readMountedScript(t, schema)
	temporal := env(service(t, p, temporalService))
	for _, db := range []string{temporal["DBNAME"], temporal["VISIBILITY_DBNAME"]} {
		assert.Contains(t, script, db, "the schema step does not set up %s", db)
	}
	for _, step := range []string{"setup-schema -v 0.0", "update-schema -d"} {
		assert.Contains(t, script, step)
	}
	assert.Contains(t, env(schema)["TEMPORAL_DB_PASSWORD_FILE"], "/run/secrets/")
	_, mounted := secretTargets(schema)[env(schema)["TEMPORAL_DB_PASSWORD_FILE"]]
	assert.True(t, mounted, "the schema step's password file is not mounted")

	// The namespace step registers every search attribute the workflows
	// set, with its type, in the workers' namespace.
	setup := service(t, p, setupService)
	script = readMountedScript(t, setup)
	for name, typ := range supportflow.SearchAttributes {
		assert.Regexp(t, `ensure_search_attribute `+name+` `+typ+`\b`, script, "the setup step does not register %s (%s)", name, typ)
	}
	w := workerConfig(t, p)
	assert.Equal(t, w.Temporal.Namespace, env(setup)["TEMPORAL_NAMESPACE"], "the setup step's namespace")
	assert.Equal(t, w.Temporal.Address, env(setup)["TEMPORAL_ADDRESS"], "the setup step's frontend")
}

// readMountedScript reads the script a one-shot service runs: the file its
// entrypoint names, from the host directory mounted at its path.
func readMountedScript(t *testing.T, s types.ServiceConfig) string {
	t.Helper()
	require.NotEmpty(t, s.Entrypoint, "%s has no entrypoint", s.Name)
	script := s.Entrypoint[len(s.Entrypoint)-1]
	for _, v := range s.Volumes {
		if rel, ok := strings.CutPrefix(script, v.Target+"/"); ok {
			b, err := os.ReadFile(filepath.Join(v.Source, rel))
			require.NoError(t, err)
			return string(b)
		}
	}
	t.Fatalf("%s runs %s, which no volume mounts", s.Name, script)
	return ""
}

// TestCompose_Schedules: one setup step creates every schedule, with the
// operator command from the image, sealed with the workers' keys.
func TestCompose_Schedules(t *testing.T) {
	p := project(t)
	s := service(t, p, schedulesService)
	cmd := append(slices.Clone([]string(s.Entrypoint)), s.Command...)
	assert.Equal(t, []string{imageStarterPath, "ensure-schedules"}, cmd, "the schedules step runs `starter ensure-schedules`")

	procStarter.setEnv(t, mountedEnv(t, s))
	_, err := config.PayloadKeys()
	require.NoError(t, err, "the schedules step has no payload keys: the schedules' arguments would not be sealed")
	w := env(service(t, p, workerService))
	for _, v := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "SUPPORTFLOW_TASK_QUEUE"} {
		assert.Equal(t, w[v], env(s)[v], "the schedules step's %s differs from the worker's", v)
	}
	for name := range env(s) {
		assert.True(t, procStarter.reads(name), "schedules: %s is not a variable the starter reads", name)
	}

	// No other step creates schedules (with unsealed arguments).
	for _, other := range []string{setupService, temporalSchemaService} {
		assert.NotContains(t, readMountedScript(t, service(t, p, other)), "schedule create", "%s creates a schedule", other)
	}
}

// TestCompose_Scaling: `docker compose up -d --scale worker=3` works: the
// worker has no host port, fixed container name or hostname, and Prometheus
// reaches every replica's metrics on the compose network.
func TestCompose_Scaling(t *testing.T) {
	p := project(t)
	w := service(t, p, workerService)
	for _, pc := range w.Ports {
		assert.Empty(t, pc.Published, "worker publishes host port %s: a second replica could not bind it", pc.Published)
	}
	assert.Empty(t, w.ContainerName, "worker: a container_name allows one replica")
	assert.Empty(t, w.Hostname, "worker: a fixed hostname")
	cfg := workerConfig(t, p)
	assert.Contains(t, w.Expose, strconv.Itoa(int(listenPort(t, cfg.MetricsAddr))), "worker: the metrics port is not exposed to the network")
	if hc := w.HealthCheck; assert.NotNil(t, hc) {
		assert.Contains(t, strings.Join(hc.Test, " "), "http://127.0.0.1:"+strconv.Itoa(int(listenPort(t, cfg.MetricsAddr)))+"/metrics",
			"worker: the healthcheck probes its own /metrics")
	}
	// Every replica drains before docker kills it.
	require.NotNil(t, w.StopGracePeriod, "worker: docker's default 10s is shorter than the drain")
	assert.Greater(t, time.Duration(*w.StopGracePeriod), cfg.DrainTimeout, "worker: stop_grace_period must exceed SUPPORTFLOW_DRAIN_TIMEOUT")
	assert.Equal(t, types.RestartPolicyUnlessStopped, w.Restart)
}

// TestCompose_GoogleCredentials: the BigQuery credentials are a mounted
// secret file the worker's GOOGLE_APPLICATION_CREDENTIALS names, given to
// no other service.
func TestCompose_GoogleCredentials(t *testing.T) {
	p := project(t)
	w := service(t, p, workerService)
	path := env(w)["GOOGLE_APPLICATION_CREDENTIALS"]
	name, mounted := secretTargets(w)[path]
	require.True(t, mounted, "worker: GOOGLE_APPLICATION_CREDENTIALS=%q is not a mounted secret", path)
	assert.Equal(t, mustAbs(t, filepath.Join(repoRoot, "deploy", "secrets", name)), p.Secrets[name].File)
	for other, s := range p.Services {
		if other == workerService {
			continue
		}
		assert.NotContains(t, env(s), "GOOGLE_APPLICATION_CREDENTIALS", other)
		for _, sc := range s.Secrets {
			assert.NotEqual(t, name, sc.Source, "%s mounts the Google credentials", other)
		}
	}
}

// TestCompose_Configuration runs each supportflow program's own loader on
// the environment its service gets, then checks the variables are ones it
// reads, the addresses point at compose services, and the worker and the
// API agree.
func TestCompose_Configuration(t *testing.T) {
	p := project(t)
	for name, proc := range supportflowServices {
		for v := range env(service(t, p, name)) {
			assert.True(t, proc.reads(v), "%s: %s is not a variable %s reads", name, v, proc)
		}
	}
	w := workerConfig(t, p)
	a := apiConfig(t, p)
	host, port, err := net.SplitHostPort(w.Temporal.Address)
	require.NoError(t, err)
	assert.Equal(t, temporalService, host)
	assert.Equal(t, "7233", port)
	assert.Equal(t, w.Temporal.Address, a.Temporal.Address)
	assert.Equal(t, w.Temporal.Namespace, a.Temporal.Namespace)
	assert.Equal(t, w.Temporal.Address, env(service(t, p, temporalUIService))["TEMPORAL_ADDRESS"], "the Web UI's frontend")
	assert.Equal(t, w.Account, a.Account, "the API would look for approvals in another ledger")
	assert.Equal(t, w.PayloadKeys.IDs(), a.PayloadKeys.IDs(), "the worker and the API seal with different keys")

	api := service(t, p, apiService)
	if hc := api.HealthCheck; assert.NotNil(t, hc) {
		assert.Contains(t, strings.Join(hc.Test, " "), "http://127.0.0.1:"+strconv.Itoa(int(listenPort(t, a.Addr)))+"/readyz")
	}
}

// TestCompose_Healthchecks: each long-running supportflow service has a
// healthcheck that runs `worker probe` (the image has no shell or curl) on
// a path its program serves, on a port it listens on: the test sends the
// probe's request to the program's own handler, as it is built from the
// service's environment. The proxy waits for the API and the codec gateway
// to be healthy.
func TestCompose_Healthchecks(t *testing.T) {
	p := project(t)
	cfgs := map[string]loadedConfig{
		workerService:  {worker: workerConfig(t, p)},
		apiService:     {api: apiConfig(t, p)},
		gatewayService: {gateway: gatewayConfig(t, p)},
	}
	for name, cfg := range cfgs {
		s := service(t, p, name)
		proc := supportflowServices[name]
		hc := s.HealthCheck
		if !assert.NotNil(t, hc, "%s: no healthcheck", name) || !assert.False(t, hc.Disable, "%s: healthcheck disabled", name) {
			continue
		}
		require.Len(t, hc.Test, 4, "%s: healthcheck %q", name, hc.Test)
		assert.Equal(t, []string{"CMD", "/usr/local/bin/worker", "probe"}, []string(hc.Test[:3]), "%s: the healthcheck runs `worker probe URL`", name)
		u, err := url.Parse(hc.Test[3])
		require.NoError(t, err, "%s: healthcheck URL", name)
		assert.Equal(t, "http", u.Scheme, "%s: healthcheck URL", name)
		assert.Equal(t, "127.0.0.1", u.Hostname(), "%s: the healthcheck probes its own container", name)
		port, err := strconv.ParseUint(u.Port(), 10, 16)
		require.NoError(t, err, "%s: healthcheck URL %s has no port", name, u)
		h, ok := servers(t, proc, cfg)[int32(port)]
		require.True(t, ok, "%s: the healthcheck's port %d is not one %s listens on", name, port, proc)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, u.RequestURI(), nil))
		if u.Path == "/readyz" {
			// Ready or not (this test has no database), but a route.
			assert.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, rec.Code, "%s: GET %s answers %d", name, u.Path, rec.Code)
		} else {
			assert.Equal(t, http.StatusOK, rec.Code, "%s: the healthcheck's GET %s answers %d", name, u.Path, rec.Code)
		}
	}
	proxy := service(t, p, proxyService)
	for _, upstream := range []string{apiService, gatewayService} {
		assert.Equal(t, types.ServiceConditionHealthy, proxy.DependsOn[upstream].Condition, "the proxy starts before %s is healthy", upstream)
	}
}

// The Temporal service runs with supportflow's dynamic config, mounted
// read-only from deploy/, and that file holds exactly the values the
// production-topology tests run with (comments aside).
func TestCompose_MountsTheDynamicConfig(t *testing.T) {
	p := project(t)
	svc := service(t, p, temporalService)
	path := env(svc)["DYNAMIC_CONFIG_FILE_PATH"]
	require.NotEmpty(t, path)
	var mounted bool
	for _, v := range svc.Volumes {
		if v.Target == "/etc/temporal/"+path {
			mounted = true
			assert.True(t, v.ReadOnly)
			assert.Equal(t, mustAbs(t, filepath.Join(repoRoot, "deploy", "temporal-dynamicconfig.yaml")), v.Source)
		}
	}
	assert.True(t, mounted, "the dynamic config file is mounted where DYNAMIC_CONFIG_FILE_PATH points")

	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "temporal-dynamicconfig.yaml"))
	require.NoError(t, err)
	var values []string
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSuffix(line, "\n"); line != "" && !strings.HasPrefix(line, "#") {
			values = append(values, line)
		}
	}
	assert.Equal(t, devenv.DeployedDynamicConfig, strings.Join(values, "\n")+"\n")
}

// TestCompose_TemporalMTLS loads the mutual-TLS override: the frontend
// requires client certificates from the CA, and every Temporal client
// presents one, by names its program reads, from mounted secrets.
func TestCompose_TemporalMTLS(t *testing.T) {
	p := project(t, mtlsOverride)
	server := service(t, p, temporalService)
	se := env(server)
	assert.Equal(t, "true", se["TEMPORAL_TLS_REQUIRE_CLIENT_AUTH"])
	for _, v := range []string{"TEMPORAL_TLS_FRONTEND_CERT", "TEMPORAL_TLS_FRONTEND_KEY", "TEMPORAL_TLS_CLIENT1_CA_CERT",
		"TEMPORAL_TLS_SERVER_CERT", "TEMPORAL_TLS_SERVER_KEY", "TEMPORAL_TLS_SERVER_CA_CERT"} {
		_, mounted := secretTargets(server)[se[v]]
		assert.True(t, mounted, "temporal: %s=%q is not a mounted secret", v, se[v])
	}
	for name, proc := range map[string]process{workerService: procWorker, apiService: procAPI, schedulesService: procStarter, setupService: procStarter} {
		s := service(t, p, name)
		e := env(s)
		assert.Equal(t, se["TEMPORAL_TLS_FRONTEND_SERVER_NAME"], e["TEMPORAL_TLS_SERVER_NAME"], "%s: the name the frontend's certificate is checked for", name)
		for _, v := range []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_PATH"} {
			assert.True(t, proc.reads(v), "%s: %s is not read", name, v)
			_, mounted := secretTargets(s)[e[v]]
			assert.True(t, mounted, "%s: %s=%q is not a mounted secret", name, v, e[v])
		}
		if proc != procStarter {
			continue
		}
		// The starter (and so the schedules step) accepts the settings.
		proc.setEnv(t, mountedEnv(t, s))
		_, err := config.TemporalSettings()
		assert.NoError(t, err, "%s: the Temporal connection settings are rejected", name)
	}
	workerConfig(t, p)
	apiConfig(t, p)
	ui := service(t, p, temporalUIService)
	for _, v := range []string{"TEMPORAL_TLS_CA", "TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY"} {
		_, mounted := secretTargets(ui)[env(ui)[v]]
		assert.True(t, mounted, "temporal-ui: %s is not a mounted secret", v)
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	return abs
}

// firstPattern is the first line of an ignore file that is not blank or a
// comment.
func firstPattern(s string) string {
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line
		}
	}
	return ""
}

// TestCompose_ServicesRunTheirProgram: each service of the image runs the
// program its variables are checked against (supportflowServices): the
// worker is the image's entrypoint; the API and the codec gateway replace
// it with their own.
func TestCompose_ServicesRunTheirProgram(t *testing.T) {
	p := project(t)
	for name, want := range map[string][]string{
		workerService:  nil,
		apiService:     {imageAPIPath},
		gatewayService: {imageGatewayPath},
	} {
		s := service(t, p, name)
		cmd := append(slices.Clone([]string(s.Entrypoint)), s.Command...)
		if len(cmd) == 0 {
			cmd = nil
		}
		assert.Equal(t, want, cmd, "%s runs %v", name, cmd)
	}
}
