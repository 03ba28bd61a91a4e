package deploy

import (
	"cmp"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
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
	"github.com/supportflow/supportflow/internal/policy"
)

// repoRoot is the repository root, relative to this package's directory
// (where go test runs).
const repoRoot = "../.."

// hostEnv stands in for the deployment host's environment: a value for every
// variable docker-compose.yml takes from it. The values are distinctive, so
// a test can tell that a setting came from here and not from the file.
var hostEnv = map[string]string{
	"POSTGRES_PASSWORD":        "host-postgres-password",
	"SUPPORTFLOW_PAYLOAD_KEYS": "k1:3q2+7w0yZ0Vc9xL4kQ1rD8uP5sT6vW2aB3cE4fG5hI8=",
	"SUPPORTFLOW_CODEC_TOKENS": "host-codec-token-0123456789",
	"ZENDESK_SUBDOMAIN":        "host-subdomain",
	"ZENDESK_EMAIL":            "host-agent@example.com",
	"ZENDESK_API_TOKEN":        "host-zendesk-token",
	"SUBSCRIPTIONS_URL":        "https://host-subscriptions.example.com",
	"SUBSCRIPTIONS_TOKEN":      "host-subscriptions-token",
	"MODEL_API_KEY":            "host-model-key",
	"BIGQUERY_PROJECT":         "host-analytics",
	"BIGQUERY_DATASET":         "host_commerce",
	"SUPPORTFLOW_API_TOKENS":   "host-app:app:host-api-token-0123456789,host-approver:approver:host-approver-token-0123456789",
	"ZENDESK_WEBHOOK_SECRET":   "host-webhook-secret",
	"ZENDESK_API_USER_ID":      "900000000001",
}

// The services docker-compose.yml must define.
const (
	postgresService   = "postgres"
	temporalService   = "temporal"
	temporalUIService = "temporal-ui"
	workerService     = "worker"
	setupService      = "temporal-setup"
	apiService        = "api"
	gatewayService    = "codec-gateway"
)

// loadCompose loads, interpolates, validates (against the compose schema
// and for consistency) and normalises docker-compose.yml the way docker
// compose does. Interpolation sees env and nothing else: neither this
// process's environment nor an .env file, so the result does not depend on
// the machine running the test.
func loadCompose(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	var pairs []string
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	opts, err := cli.NewProjectOptions(
		[]string{filepath.Join(repoRoot, "docker-compose.yml")},
		cli.WithEnv(pairs),
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	return opts.LoadProject(t.Context())
}

// project loads docker-compose.yml with hostEnv, failing the test if it
// does not load.
func project(t *testing.T) *types.Project {
	t.Helper()
	p, err := loadCompose(t, hostEnv)
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

func TestComposeServicesExist(t *testing.T) {
	p := project(t)
	for _, name := range []string{postgresService, temporalService, temporalUIService, workerService} {
		service(t, p, name)
	}
}

func TestComposeImagesArePinned(t *testing.T) {
	p := project(t)
	for name, s := range p.Services {
		if s.Build != nil {
			continue
		}
		_, tag, ok := strings.Cut(s.Image, ":")
		if !ok || tag == "" || tag == "latest" {
			t.Errorf("service %s: image %q is not pinned to a tag", name, s.Image)
		}
	}
}

// TestComposeRequiresHostVariables proves the secrets and per-deployment
// values are required (${VAR:?...}) rather than defaulted: the file does
// not load without them, nor with any one of them missing or empty.
func TestComposeRequiresHostVariables(t *testing.T) {
	if _, err := loadCompose(t, nil); err == nil {
		t.Fatal("docker-compose.yml loads with no host variables; secrets must use ${VAR:?message}")
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
				t.Errorf("loading with %s %s: error does not name it: %v", what, name, err)
			}
		}
	}
}

// TestComposeSecretsComeFromHost checks that no secret the worker reads has
// its value written in the file: each must carry a value from the host.
func TestComposeSecretsComeFromHost(t *testing.T) {
	p := project(t)
	w := env(service(t, p, workerService))
	for _, v := range config.Vars {
		if !v.Secret {
			continue
		}
		got, ok := w[v.Name]
		if !ok {
			continue // a missing required variable is TestComposeWorkerRequiredVariables' failure
		}
		if !slices.ContainsFunc(slices.Collect(maps.Values(hostEnv)), func(h string) bool { return strings.Contains(got, h) }) {
			t.Errorf("worker: secret %s is not taken from the host environment", v.Name)
		}
	}
	if got := env(service(t, p, postgresService))["POSTGRES_PASSWORD"]; got != hostEnv["POSTGRES_PASSWORD"] {
		t.Errorf("postgres: POSTGRES_PASSWORD is %q, want the host's POSTGRES_PASSWORD", got)
	}
}

func TestComposeWorkerBuildsFromRepoDockerfile(t *testing.T) {
	w := service(t, project(t), workerService)
	if w.Build == nil {
		t.Fatalf("worker: no build section (image %q); it must build from the repository", w.Image)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := filepath.Abs(w.Build.Context)
	if err != nil {
		t.Fatal(err)
	}
	if ctx != root {
		t.Errorf("worker: build context is %s, want the repository root %s", ctx, root)
	}
	dockerfile := w.Build.Dockerfile
	if dockerfile == "" {
		dockerfile = "Dockerfile"
	}
	if !filepath.IsAbs(dockerfile) {
		dockerfile = filepath.Join(ctx, dockerfile)
	}
	if want := filepath.Join(root, "Dockerfile"); dockerfile != want {
		t.Errorf("worker: builds from %s, want %s", dockerfile, want)
	}
}

func TestComposeDependsOnHealthy(t *testing.T) {
	p := project(t)
	for _, d := range []struct{ from, to string }{
		{workerService, postgresService},
		{workerService, temporalService},
		{temporalService, postgresService},
		{temporalUIService, temporalService},
	} {
		dep, ok := service(t, p, d.from).DependsOn[d.to]
		if !ok {
			t.Errorf("%s does not depend on %s", d.from, d.to)
			continue
		}
		if dep.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s depends on %s with condition %q, want %q", d.from, d.to, dep.Condition, types.ServiceConditionHealthy)
		}
	}
}

func TestComposeHealthchecks(t *testing.T) {
	p := project(t)
	for _, c := range []struct{ service, command string }{
		{postgresService, "pg_isready"},
		{temporalService, "temporal"},
	} {
		hc := service(t, p, c.service).HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE" {
			t.Errorf("%s: no healthcheck", c.service)
			continue
		}
		if !strings.Contains(strings.Join(hc.Test[1:], " "), c.command) {
			t.Errorf("%s: healthcheck %q does not run %s", c.service, hc.Test, c.command)
		}
	}
	// The worker waits for temporal to be healthy; that only means its
	// namespace exists if the healthcheck looks for that namespace.
	ns := env(service(t, p, workerService))["TEMPORAL_NAMESPACE"]
	if ns == "" {
		ns = varDefault(t, "TEMPORAL_NAMESPACE")
	}
	if hc := service(t, p, temporalService).HealthCheck; hc != nil && !slices.Contains(hc.Test, ns) {
		t.Errorf("temporal: healthcheck %q does not check the worker's namespace %q", hc.Test, ns)
	}
}

func TestComposePublishedPorts(t *testing.T) {
	p := project(t)
	for _, c := range []struct {
		service string
		port    uint32
	}{
		{temporalService, 7233},
		{temporalUIService, 8080},
	} {
		ports := service(t, p, c.service).Ports
		if !slices.ContainsFunc(ports, func(pc types.ServicePortConfig) bool {
			return pc.Target == c.port && pc.Published == strconv.Itoa(int(c.port))
		}) {
			t.Errorf("%s does not publish port %d (ports: %+v)", c.service, c.port, ports)
		}
	}
}

// TestComposeWorkerVariablesAreKnown fails on a variable the worker does not
// read, such as a misspelt one, which would otherwise be silently ignored.
func TestComposeWorkerVariablesAreKnown(t *testing.T) {
	known := map[string]bool{}
	for _, v := range config.Vars {
		known[v.Name] = true
	}
	for _, e := range policy.Env {
		known[e.Name] = true
	}
	for name := range service(t, project(t), workerService).Environment {
		if !known[name] {
			t.Errorf("worker: %s is not a variable the worker reads (see config.Vars and policy.Env)", name)
		}
	}
}

func TestComposeWorkerRequiredVariables(t *testing.T) {
	w := env(service(t, project(t), workerService))
	required := []string{"TEMPORAL_ADDRESS"} // has a default, but localhost is wrong in a container
	for _, v := range config.Vars {
		if strings.Contains(v.Help, "required") {
			required = append(required, v.Name)
		}
	}
	for _, name := range required {
		if w[name] == "" {
			t.Errorf("worker: required variable %s is not set", name)
		}
	}
	if w["ZENDESK_URL"] == "" && w["ZENDESK_SUBDOMAIN"] == "" {
		t.Error("worker: neither ZENDESK_URL nor ZENDESK_SUBDOMAIN is set")
	}
}

// TestComposeWorkerConfiguration runs the worker's own configuration loader
// on the environment the compose file gives it, then checks that the
// addresses in it point at the compose services.
func TestComposeWorkerConfiguration(t *testing.T) {
	p := project(t)
	cfg := workerConfig(t, service(t, p, workerService))

	host, port, err := net.SplitHostPort(cfg.TemporalAddress)
	if err != nil {
		t.Fatalf("worker: TEMPORAL_ADDRESS %q: %v", cfg.TemporalAddress, err)
	}
	if host != temporalService || port != "7233" {
		t.Errorf("worker: TEMPORAL_ADDRESS is %s, want %s:7233", cfg.TemporalAddress, temporalService)
	}
	if ui := env(service(t, p, temporalUIService))["TEMPORAL_ADDRESS"]; ui != cfg.TemporalAddress {
		t.Errorf("temporal-ui: TEMPORAL_ADDRESS is %q, want the worker's %q", ui, cfg.TemporalAddress)
	}

	pg := env(service(t, p, postgresService))
	u, err := url.Parse(cfg.DatabaseURL)
	if err != nil {
		t.Fatalf("worker: DATABASE_URL does not parse: %v", err)
	}
	password, _ := u.User.Password()
	for _, c := range []struct{ what, got, want string }{
		{"host", u.Hostname(), postgresService},
		{"port", cmp.Or(u.Port(), "5432"), "5432"},
		{"database", strings.TrimPrefix(u.Path, "/"), pg["POSTGRES_DB"]},
		{"user", u.User.Username(), pg["POSTGRES_USER"]},
		{"password", password, pg["POSTGRES_PASSWORD"]},
	} {
		if c.got != c.want {
			t.Errorf("worker: DATABASE_URL %s is %q, want %q (from the postgres service)", c.what, c.got, c.want)
		}
	}

	tp := env(service(t, p, temporalService))
	if tp["POSTGRES_SEEDS"] != postgresService {
		t.Errorf("temporal: POSTGRES_SEEDS is %q, want %q", tp["POSTGRES_SEEDS"], postgresService)
	}
	if tp["POSTGRES_USER"] != pg["POSTGRES_USER"] || tp["POSTGRES_PWD"] != pg["POSTGRES_PASSWORD"] {
		t.Error("temporal: POSTGRES_USER/POSTGRES_PWD do not match the postgres service's credentials")
	}
	if db := tp["DBNAME"]; db == pg["POSTGRES_DB"] {
		t.Errorf("temporal: DBNAME %q is supportflow's database; Temporal needs its own", db)
	}
}

// TestComposeWorkerStopGracePeriod checks that docker does not kill a
// stopping worker before its drain timeout has run out.
func TestComposeWorkerStopGracePeriod(t *testing.T) {
	w := service(t, project(t), workerService)
	drain := workerConfig(t, w).DrainTimeout
	if w.StopGracePeriod == nil {
		t.Fatalf("worker: no stop_grace_period; docker's 10s default is shorter than the %s drain timeout", drain)
	}
	if grace := time.Duration(*w.StopGracePeriod); grace <= drain {
		t.Errorf("worker: stop_grace_period %s does not exceed SUPPORTFLOW_DRAIN_TIMEOUT %s", grace, drain)
	}
	if w.Restart != types.RestartPolicyUnlessStopped {
		t.Errorf("worker: restart is %q, want %q", w.Restart, types.RestartPolicyUnlessStopped)
	}
}

// workerConfig runs config.LoadWorker with exactly the worker service's
// environment: every variable the worker reads is set to the service's
// value, or to empty (which the worker treats as unset).
func workerConfig(t *testing.T, w types.ServiceConfig) config.Worker {
	t.Helper()
	e := env(w)
	for _, v := range config.Vars {
		t.Setenv(v.Name, e[v.Name])
	}
	for _, v := range policy.Env {
		t.Setenv(v.Name, e[v.Name])
	}
	cfg, err := config.LoadWorker()
	if err != nil {
		t.Fatalf("the worker rejects the compose file's environment: %v", err)
	}
	return cfg
}

func varDefault(t *testing.T, name string) string {
	t.Helper()
	for _, v := range config.Vars {
		if v.Name == name {
			return v.Default
		}
	}
	t.Fatalf("config.Vars has no %s", name)
	return ""
}

// TestComposeRegistersSearchAttributes checks the one-shot setup service
// registers every search attribute the workflows set, with its type, and
// creates the scan schedule, and that the worker starts only after it
// succeeded.
func TestComposeRegistersSearchAttributes(t *testing.T) {
	p := project(t)
	setup := service(t, p, setupService)
	script := strings.Join(setup.Command, " ")
	for name, typ := range supportflow.SearchAttributes {
		if !strings.Contains(script, name) {
			t.Errorf("%s does not register search attribute %s", setupService, name)
		}
		if !strings.Contains(script, "--type "+typ) {
			t.Errorf("%s does not register type %s (for %s)", setupService, typ, name)
		}
	}
	for _, want := range []string{
		"--schedule-id " + supportflow.ScanScheduleID, "--type " + supportflow.ScanTicketsWorkflow,
		"--schedule-id " + supportflow.ReconcileScheduleID, "--type " + supportflow.ReconcileTicketsWorkflow,
		"--interval 5m", "--overlap-policy Skip", "--task-queue " + supportflow.TaskQueue,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("%s does not create the scan schedule with %s", setupService, want)
		}
	}
	if d, ok := setup.DependsOn[temporalService]; !ok || d.Condition != "service_healthy" {
		t.Errorf("%s must wait for a healthy %s, got %+v", setupService, temporalService, setup.DependsOn)
	}
	w := service(t, p, workerService)
	if d, ok := w.DependsOn[setupService]; !ok || d.Condition != "service_completed_successfully" {
		t.Errorf("worker must start after %s completed successfully, got %+v", setupService, w.DependsOn)
	}
}

// TestComposeAPIService checks the HTTP API service: the same image as the
// worker running `api`, started once its dependencies are healthy and the
// search attributes exist, published, health-checked on /readyz, with only
// variables the API reads, secrets from the host, and the worker's ledger
// account.
func TestComposeAPIService(t *testing.T) {
	p := project(t)
	a := service(t, p, apiService)
	if a.Build == nil {
		t.Fatalf("api: no build section; it must build from the repository like the worker")
	}
	if !slices.Equal([]string(a.Command), []string{"api"}) {
		t.Errorf("api: command %q, want [api]", a.Command)
	}
	for dep, cond := range map[string]string{
		postgresService: types.ServiceConditionHealthy, temporalService: types.ServiceConditionHealthy,
		setupService: types.ServiceConditionCompletedSuccessfully,
	} {
		if d, ok := a.DependsOn[dep]; !ok || d.Condition != cond {
			t.Errorf("api: depends on %s with %+v, want %s", dep, d, cond)
		}
	}
	if hc := a.HealthCheck; hc == nil || !strings.Contains(strings.Join(hc.Test, " "), "probe") || !strings.Contains(strings.Join(hc.Test, " "), "/readyz") {
		t.Errorf("api: healthcheck %+v must probe /readyz", a.HealthCheck)
	}
	known := map[string]bool{}
	for _, v := range append(slices.Clone(config.Vars), config.APIVars...) {
		known[v.Name] = true
	}
	e := env(a)
	for name := range e {
		if !known[name] {
			t.Errorf("api: %s is not a variable the API reads", name)
		}
	}
	for _, secret := range []string{"SUPPORTFLOW_API_TOKENS", "ZENDESK_WEBHOOK_SECRET"} {
		if e[secret] != hostEnv[secret] {
			t.Errorf("api: %s is not taken from the host", secret)
		}
	}
	for _, v := range append(slices.Clone(config.Vars), config.APIVars...) {
		t.Setenv(v.Name, e[v.Name])
	}
	cfg, err := config.LoadAPI()
	if err != nil {
		t.Fatalf("the API rejects the compose file's environment: %v", err)
	}
	if w := workerConfig(t, service(t, p, workerService)); w.Account != cfg.Account {
		t.Errorf("api account %q differs from the worker's %q: approvals would look in another ledger", cfg.Account, w.Account)
	}
	_, port, _ := strings.Cut(cfg.Addr, ":")
	if !slices.ContainsFunc(a.Ports, func(pc types.ServicePortConfig) bool { return strconv.Itoa(int(pc.Target)) == port }) {
		t.Errorf("api: listens on %s but does not publish it (ports %+v)", cfg.Addr, a.Ports)
	}
	if hc := service(t, p, workerService).HealthCheck; hc == nil || !strings.Contains(strings.Join(hc.Test, " "), "/metrics") {
		t.Errorf("worker: healthcheck %+v must probe its /metrics endpoint", hc)
	}
}

// The Temporal service runs with supportflow's dynamic config, mounted
// read-only from deploy/, and that file holds exactly the values the
// production-topology tests run with (comments aside).
func TestComposeMountsTheDynamicConfig(t *testing.T) {
	p := project(t)
	svc, err := p.GetService("temporal")
	require.NoError(t, err)
	path := svc.Environment["DYNAMIC_CONFIG_FILE_PATH"]
	require.NotNil(t, path)
	assert.Equal(t, "config/dynamicconfig/supportflow.yaml", *path)
	var mounted bool
	for _, v := range svc.Volumes {
		if v.Target == "/etc/temporal/"+*path {
			mounted = true
			assert.True(t, v.ReadOnly)
			want, err := filepath.Abs(filepath.Join(repoRoot, "deploy", "temporal-dynamicconfig.yaml"))
			require.NoError(t, err)
			assert.Equal(t, want, v.Source)
		}
	}
	assert.True(t, mounted, "the dynamic config file is mounted where DYNAMIC_CONFIG_FILE_PATH points")

	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "temporal-dynamicconfig.yaml"))
	require.NoError(t, err)
	var values []string
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			values = append(values, line)
		}
	}
	assert.Equal(t, devenv.DeployedDynamicConfig, strings.Join(values, "\n")+"\n")
}

// The Web UI decodes payloads through the codec gateway: its codec
// endpoint is the gateway's published (loopback-only) port, the gateway
// forwards to the API with a token the API accepts, and the API allows the
// UI's origin.
func TestComposeWebUIDecodesThroughTheCodecGateway(t *testing.T) {
	p := project(t)
	ui := env(service(t, p, temporalUIService))
	endpoint, err := url.Parse(ui["TEMPORAL_CODEC_ENDPOINT"])
	require.NoError(t, err, "temporal-ui: TEMPORAL_CODEC_ENDPOINT")
	assert.Equal(t, "/codec", endpoint.Path, "the UI posts to {endpoint}/decode")

	g := service(t, p, gatewayService)
	assert.Equal(t, []string{"codec-gateway"}, []string(g.Command))
	assert.NotNil(t, g.Build, "the gateway is the worker image")
	for _, v := range config.GatewayVars {
		t.Setenv(v.Name, env(g)[v.Name])
	}
	for name := range g.Environment {
		assert.True(t, slices.ContainsFunc(config.GatewayVars, func(v config.Var) bool { return v.Name == name }), "gateway: %s is not read", name)
	}
	gc, err := config.LoadGateway()
	require.NoError(t, err, "the gateway accepts the compose file's environment")
	assert.True(t, slices.ContainsFunc(g.Ports, func(pc types.ServicePortConfig) bool {
		return pc.HostIP == "127.0.0.1" && pc.Published == endpoint.Port() && strings.HasSuffix(gc.Addr, ":"+strconv.Itoa(int(pc.Target)))
	}), "the gateway publishes the UI's codec port on loopback only: %+v", g.Ports)

	a := env(service(t, p, apiService))
	for _, v := range append(slices.Clone(config.Vars), config.APIVars...) {
		t.Setenv(v.Name, a[v.Name])
	}
	ac, err := config.LoadAPI()
	require.NoError(t, err)
	assert.Equal(t, "http://"+apiService+":"+strings.TrimPrefix(ac.Addr, ":"), gc.Upstream.String(), "the gateway forwards to the API")
	assert.Contains(t, ac.CodecTokens, gc.Token, "the API accepts the gateway's token")
	uiPort := strconv.Itoa(int(service(t, p, temporalUIService).Ports[0].Target))
	assert.Contains(t, ac.CodecOrigins, "http://localhost:"+uiPort, "the API allows the UI's origin")
	assert.Equal(t, hostEnv["SUPPORTFLOW_PAYLOAD_KEYS"], a["SUPPORTFLOW_PAYLOAD_KEYS"])
	assert.Equal(t, hostEnv["SUPPORTFLOW_PAYLOAD_KEYS"], env(service(t, p, workerService))["SUPPORTFLOW_PAYLOAD_KEYS"], "worker and API seal with the same keys")
}
