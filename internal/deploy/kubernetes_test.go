package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/starter"
)

// overlays are the Kustomize overlays in deploy/kubernetes/overlays, each
// a complete deployment.
var overlays = []string{"self-hosted", "temporal-cloud", "temporal-cloud-mtls"}

// secretValues stand in for the values of the Secrets' keys the manifests
// pass as variables (valueFrom.secretKeyRef): only secrets config has no
// *_FILE variable for; the others are mounted files (fixtures).
var secretValues = map[string]string{
	"database-url": "postgres://supportflow@db.example:5432/supportflow",
}

// apiShutdown is how long `supportflow-api` and `codec-gateway` give
// in-flight requests after SIGTERM (workerapp's serve).
const apiShutdown = 10 * time.Second

// k8sObjects are an overlay's built resources, decoded strictly into the
// Kubernetes API types (an unknown or misspelt field fails the decode).
type k8sObjects struct {
	namespace   string
	deployments []appsv1.Deployment
	jobs        []batchv1.Job
	services    []corev1.Service
	pdbs        []policyv1.PodDisruptionBudget
	configMaps  map[string]corev1.ConfigMap
}

// buildOverlay runs kustomize (its Go API, as `kubectl kustomize` does) on
// deploy/kubernetes/overlays/NAME.
func buildOverlay(t *testing.T, name string) k8sObjects {
	t.Helper()
	dir := mustAbs(t, filepath.Join(repoRoot, "deploy", "kubernetes", "overlays", name))
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", name)
	objs := k8sObjects{configMaps: map[string]corev1.ConfigMap{}}
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		require.NoError(t, err)
		var into any
		switch kind := r.GetKind(); kind {
		case "Deployment":
			objs.deployments = append(objs.deployments, appsv1.Deployment{})
			into = &objs.deployments[len(objs.deployments)-1]
		case "Job":
			objs.jobs = append(objs.jobs, batchv1.Job{})
			into = &objs.jobs[len(objs.jobs)-1]
		case "Service":
			objs.services = append(objs.services, corev1.Service{})
			into = &objs.services[len(objs.services)-1]
		case "PodDisruptionBudget":
			objs.pdbs = append(objs.pdbs, policyv1.PodDisruptionBudget{})
			into = &objs.pdbs[len(objs.pdbs)-1]
		case "ConfigMap":
			var cm corev1.ConfigMap
			require.NoError(t, yaml.UnmarshalStrict(b, &cm), "%s: ConfigMap %s", name, r.GetName())
			objs.configMaps[cm.Name] = cm
			continue
		default:
			t.Fatalf("%s: a %s (%s) these tests do not check", name, kind, r.GetName())
		}
		require.NoError(t, yaml.UnmarshalStrict(b, into), "%s: %s %s does not decode as the Kubernetes API type", name, r.GetKind(), r.GetName())
		ns := r.GetNamespace()
		assert.NotEmpty(t, ns, "%s: %s %s has no namespace", name, r.GetKind(), r.GetName())
		if objs.namespace == "" {
			objs.namespace = ns
		}
		assert.Equal(t, objs.namespace, ns, "%s: %s %s is in another namespace", name, r.GetKind(), r.GetName())
	}
	return objs
}

// workload is a Deployment's or a Job's pod template.
type workload struct {
	kind, name string
	replicas   int32
	template   corev1.PodTemplateSpec
}

func (o k8sObjects) workloads() []workload {
	var ws []workload
	for _, d := range o.deployments {
		ws = append(ws, workload{"Deployment", d.Name, ptrOr(d.Spec.Replicas, 1), d.Spec.Template})
	}
	for _, j := range o.jobs {
		ws = append(ws, workload{"Job", j.Name, 1, j.Spec.Template})
	}
	return ws
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// processOf says which supportflow program a container runs, from its
// command (the image's entrypoint, the worker, when it has none).
func processOf(c corev1.Container) process {
	if len(c.Command) == 0 {
		if len(c.Args) == 0 {
			return procWorker
		}
		return process("unknown arguments " + strings.Join(c.Args, " "))
	}
	switch c.Command[0] {
	case imageStarterPath:
		return procStarter
	case imageAPIPath:
		return procAPI
	case imageGatewayPath:
		return procGateway
	}
	return process("unknown command " + c.Command[0])
}

// envSource is where a container's variable gets its value.
type envSource struct {
	value     string // a literal, or a ConfigMap's value
	configMap string // the ConfigMap it came from, if any
	secret    *corev1.SecretKeySelector
}

// containerEnv resolves a container's environment: its envFrom ConfigMaps
// (from the built objects), then its env entries, later ones winning.
func containerEnv(t *testing.T, o k8sObjects, where string, c corev1.Container) map[string]envSource {
	t.Helper()
	m := map[string]envSource{}
	for _, ef := range c.EnvFrom {
		require.NotNil(t, ef.ConfigMapRef, "%s: envFrom other than a ConfigMap", where)
		cm, ok := o.configMaps[ef.ConfigMapRef.Name]
		require.True(t, ok, "%s: envFrom names ConfigMap %s, which the overlay does not build", where, ef.ConfigMapRef.Name)
		for k, v := range cm.Data {
			m[ef.Prefix+k] = envSource{value: v, configMap: cm.Name}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			m[e.Name] = envSource{value: e.Value}
		case e.ValueFrom.SecretKeyRef != nil:
			m[e.Name] = envSource{secret: e.ValueFrom.SecretKeyRef}
		default:
			t.Fatalf("%s: %s takes its value from something other than a Secret", where, e.Name)
		}
	}
	return m
}

// secretFile is a file a container sees from a mounted Secret.
type secretFile struct{ secret, key string }

// secretFiles maps each file path a container sees from a mounted Secret
// volume to the Secret and key behind it. A volume without items shows
// every key; the tests know the keys of those (kubernetes.io/tls Secrets).
func secretFiles(t *testing.T, where string, pod corev1.PodSpec, c corev1.Container) map[string]secretFile {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	files := map[string]secretFile{}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		require.True(t, ok, "%s: mounts volume %s, which the pod does not define", where, vm.Name)
		if v.Secret == nil {
			continue
		}
		assert.True(t, vm.ReadOnly, "%s: Secret volume %s is mounted writable", where, vm.Name)
		assert.Empty(t, vm.SubPath, "%s: Secret volume %s is mounted with subPath, so a rotated secret never reaches the file", where, vm.Name)
		items := v.Secret.Items
		if len(items) == 0 {
			for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, "ca.crt"} {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			files[path.Join(vm.MountPath, it.Path)] = secretFile{v.Secret.SecretName, it.Key}
		}
	}
	return files
}

// isFileVar reports whether a variable's value is a file a secret is read
// from.
func isFileVar(name string) bool {
	return strings.HasSuffix(name, "_FILE") || strings.HasSuffix(name, "_PATH") || name == "GOOGLE_APPLICATION_CREDENTIALS"
}

// loadedConfig is a container's configuration as its program's own loader
// reads it.
type loadedConfig struct {
	worker  config.Worker
	api     config.API
	gateway config.Gateway
}

// loadContainer runs the container's program's configuration loader on
// the container's environment, with each Secret key replaced by a stand-in
// value and each mounted secret file by a fixture file.
func loadContainer(t *testing.T, where string, p process, env map[string]envSource, files map[string]secretFile) loadedConfig {
	t.Helper()
	dir := t.TempDir()
	plain := map[string]string{}
	for name, src := range env {
		switch {
		case src.secret != nil:
			v, ok := secretValues[src.secret.Key]
			require.True(t, ok, "%s: %s names Secret key %s, which has no stand-in", where, name, src.secret.Key)
			plain[name] = v
		case isFileVar(name):
			if f, ok := files[src.value]; ok {
				plain[name] = writeFixture(t, filepath.Join(dir, f.secret), path.Base(src.value))
			} else {
				plain[name] = src.value // not mounted: the loader will say so
			}
		default:
			plain[name] = src.value
		}
	}
	p.setEnv(t, plain)
	var cfg loadedConfig
	var err error
	switch p {
	case procWorker:
		cfg.worker, err = config.LoadWorker()
	case procAPI:
		cfg.api, err = config.LoadAPI()
	case procGateway:
		cfg.gateway, err = config.LoadGateway()
	case procStarter:
		// What the starter reads before it dials (cmd/starter).
		if _, err = config.PayloadKeys(); err == nil {
			_, err = config.TemporalSettings()
		}
	default:
		t.Fatalf("%s: runs %s", where, p)
	}
	require.NoError(t, err, "%s: %s rejects the manifest's environment", where, p)
	return cfg
}

// servers are the HTTP servers a container's program runs, by port: what
// its probes may reach.
func servers(t *testing.T, p process, cfg loadedConfig) map[int32]http.Handler {
	t.Helper()
	m := map[int32]http.Handler{}
	port := func(addr string) int32 { return int32(listenPort(t, addr)) }
	switch p {
	case procWorker:
		if cfg.worker.MetricsAddr != "" {
			m[port(cfg.worker.MetricsAddr)] = metricsServer(t)
		}
	case procAPI:
		m[port(cfg.api.Addr)] = apiServer(t, cfg.api)
		if cfg.api.MetricsAddr != "" {
			m[port(cfg.api.MetricsAddr)] = metricsServer(t)
		}
	case procGateway:
		m[port(cfg.gateway.Addr)] = codec.Gateway(cfg.gateway.Upstream, cfg.gateway.Token)
	}
	return m
}

// metricsServer is the metrics endpoint as the worker and the API serve it
// (telemetry.Serve on its own listener), reached over HTTP.
func metricsServer(t *testing.T) http.Handler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tel, err := telemetry.New(ctx, telemetry.Config{ServiceName: "supportflow-probe-test"})
	require.NoError(t, err)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- telemetry.Serve(ctx, "127.0.0.1:0", tel.Handler(), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("metrics server: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the metrics server did not start")
	}
	t.Cleanup(func() {
		cancel()
		<-done
		_ = tel.Shutdown(context.Background())
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get("http://" + addr + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}

// apiServer is the API's handler as `supportflow-api` builds it, with a
// PostgreSQL that refuses connections and no Temporal: enough to tell
// which routes exist and what the health checks answer without them.
func apiServer(t *testing.T, cfg config.API) http.Handler {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://probe@127.0.0.1:1/probe?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv, err := api.New(api.Config{Tokens: cfg.Tokens, WebhookSecret: cfg.WebhookSecret, ZendeskUserID: cfg.ZendeskUserID,
		WebhookRetryAfter: cfg.WebhookRetryAfter, RelayInterval: cfg.RelayInterval,
		Codec: &codec.Codec{Keys: cfg.PayloadKeys}, CodecTokens: cfg.CodecTokens, CodecOrigins: cfg.CodecOrigins, Namespace: cfg.Temporal.Namespace},
		&starter.Starter{}, ledger.New(pool, cfg.Account), pool, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// containerPort resolves a probe's or Service's port (a number, or a
// container port's name) to a port the container declares.
func containerPort(c corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// TestKubernetes_ManifestsMatchTheCode builds every overlay and checks each
// container against the program it runs: the variables it sets are ones
// the program reads, its loader accepts them (so every required one is
// set), secrets come from Secrets (as files where config reads a file),
// probes reach paths the program serves on ports it listens on, the grace
// period outlasts the drain, and the Services and PodDisruptionBudgets
// select the pods they are for.
func TestKubernetes_ManifestsMatchTheCode(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			o := buildOverlay(t, overlay)
			require.NotEmpty(t, o.deployments)

			procs := map[process]workload{}
			listen := map[process]int32{} // the port each program serves its main endpoint on
			var temporal []string         // TEMPORAL_ADDRESS/NAMESPACE of each Temporal client
			for _, w := range o.workloads() {
				pod := w.template.Spec
				require.Len(t, pod.Containers, 1, "%s: one container", w.name)
				c := pod.Containers[0]
				where := overlay + ": " + w.kind + " " + w.name
				p := processOf(c)
				_, dup := procs[p]
				require.False(t, dup, "%s: a second workload runs %s", where, p)
				procs[p] = w

				// The image: the overlay's, pinned.
				repo, tag, ok := strings.Cut(c.Image, ":")
				assert.True(t, ok && tag != "" && tag != "latest" && repo != "supportflow", "%s: image %q is not the overlay's pinned image", where, c.Image)

				env := containerEnv(t, o, where, c)
				files := secretFiles(t, where, pod, c)
				plain := map[string]string{}
				for name, src := range env {
					assert.True(t, p.reads(name), "%s: %s is not a variable %s reads", where, name, p)
					if src.secret == nil {
						plain[name] = src.value
					}
					if isFileVar(name) {
						_, mounted := files[src.value]
						assert.True(t, mounted, "%s: %s=%s is not a file of a mounted Secret", where, name, src.value)
					}
				}
				all := map[string]string{}
				for name, src := range env {
					all[name] = src.value
				}
				checkSecretVars(t, where, p, all, func(name, _ string) bool { return env[name].secret != nil })
				cfg := loadContainer(t, where, p, env, files)

				if p != procGateway {
					temporal = append(temporal, plain["TEMPORAL_ADDRESS"]+" "+plain["TEMPORAL_NAMESPACE"])
				}

				// Probes reach what the program serves.
				srv := servers(t, p, cfg)
				probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
				if w.kind == "Job" {
					for kind, pr := range probes {
						assert.Nil(t, pr, "%s: a Job with a %s probe", where, kind)
					}
				} else {
					assert.NotNil(t, c.LivenessProbe, "%s: no liveness probe", where)
					assert.NotNil(t, c.ReadinessProbe, "%s: no readiness probe", where)
				}
				for kind, pr := range probes {
					if pr == nil {
						continue
					}
					switch {
					case pr.HTTPGet != nil:
						port, ok := containerPort(c, pr.HTTPGet.Port)
						require.True(t, ok, "%s: the %s probe's port %s is not a container port", where, kind, pr.HTTPGet.Port.String())
						h, ok := srv[port]
						require.True(t, ok, "%s: the %s probe's port %d is not one %s listens on", where, kind, port, p)
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, pr.HTTPGet.Path, nil))
						if kind == "readiness" {
							// Ready or not (this test has no database), but a
							// route: 200, or 503 while a dependency is down.
							assert.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, rec.Code,
								"%s: the readiness probe's GET %s answers %d", where, pr.HTTPGet.Path, rec.Code)
						} else {
							assert.Equal(t, http.StatusOK, rec.Code, "%s: the %s probe's GET %s on port %d answers %d", where, kind, pr.HTTPGet.Path, port, rec.Code)
						}
					default:
						// A tcpSocket probe says only that the port accepts
						// connections; every program serves a path to GET.
						t.Errorf("%s: the %s probe does not GET a path the program serves", where, kind)
					}
				}
				for port := range srv {
					if _, ok := containerPort(c, intstr.FromInt32(port)); !ok {
						t.Errorf("%s: %s listens on %d, which the container does not declare", where, p, port)
					}
				}
				switch p {
				case procAPI:
					listen[p] = int32(listenPort(t, cfg.api.Addr))
				case procGateway:
					listen[p] = int32(listenPort(t, cfg.gateway.Addr))
					assert.Equal(t, "http", cfg.gateway.Upstream.Scheme)
				}

				// Graceful stop: the grace period covers the preStop hook and
				// the program's own drain.
				grace := time.Duration(ptrOr(pod.TerminationGracePeriodSeconds, 30)) * time.Second
				var preStop time.Duration
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
					require.NotNil(t, c.Lifecycle.PreStop.Sleep, "%s: preStop other than sleep (the image has no shell)", where)
					preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
				}
				switch p {
				case procWorker:
					assert.Greater(t, grace, preStop+cfg.worker.DrainTimeout, "%s: terminationGracePeriodSeconds must outlast SUPPORTFLOW_DRAIN_TIMEOUT %s", where, cfg.worker.DrainTimeout)
				case procAPI, procGateway:
					assert.Greater(t, grace, preStop+apiShutdown, "%s: terminationGracePeriodSeconds must outlast the preStop sleep and the %s shutdown", where, apiShutdown)
				}

				// Resources and a locked-down container.
				assert.False(t, c.Resources.Requests.Cpu().IsZero(), "%s: no CPU request", where)
				assert.False(t, c.Resources.Requests.Memory().IsZero(), "%s: no memory request", where)
				assert.False(t, c.Resources.Limits.Memory().IsZero(), "%s: no memory limit", where)
				if sc := pod.SecurityContext; assert.NotNil(t, sc, "%s: no pod securityContext", where) {
					assert.True(t, ptrOr(sc.RunAsNonRoot, false), "%s: runAsNonRoot", where)
				}
			}
			for _, p := range []process{procWorker, procAPI, procGateway, procStarter} {
				assert.Contains(t, procs, p, "%s: nothing runs %s", overlay, p)
			}
			assert.Equal(t, []string{"ensure-schedules"}, procs[procStarter].template.Spec.Containers[0].Args, "%s: the Job runs `starter ensure-schedules`", overlay)
			assert.Contains(t, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}, procs[procStarter].template.Spec.RestartPolicy)
			for i := range temporal {
				assert.Equal(t, temporal[0], temporal[i], "%s: the Temporal clients disagree on the frontend or namespace", overlay)
			}

			// Services: the API's and the codec's, on different ports, each
			// reaching its program's listen port; the gateway forwards to
			// the API's Service.
			svcPort := map[process]int32{}
			for _, s := range o.services {
				var matched []process
				for p, w := range procs {
					if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
						matched = append(matched, p)
					}
				}
				require.Len(t, matched, 1, "%s: Service %s selects %v", overlay, s.Name, matched)
				p := matched[0]
				require.Len(t, s.Spec.Ports, 1, "%s: Service %s", overlay, s.Name)
				target, ok := containerPort(procs[p].template.Spec.Containers[0], s.Spec.Ports[0].TargetPort)
				require.True(t, ok, "%s: Service %s targets a port the container does not declare", overlay, s.Name)
				assert.Equal(t, listen[p], target, "%s: Service %s targets %d, but %s listens on %d", overlay, s.Name, target, p, listen[p])
				svcPort[p] = s.Spec.Ports[0].Port
				if p == procAPI {
					gwEnv := containerEnv(t, o, "gateway", procs[procGateway].template.Spec.Containers[0])
					assert.Equal(t, fmt.Sprintf("http://%s:%d", s.Name, s.Spec.Ports[0].Port), gwEnv["SUPPORTFLOW_CODEC_UPSTREAM"].value,
						"%s: the codec gateway must forward to the API's Service", overlay)
				}
			}
			assert.Contains(t, svcPort, procAPI, "%s: no Service for the API", overlay)
			assert.Contains(t, svcPort, procGateway, "%s: no Service for the codec", overlay)
			assert.NotContains(t, svcPort, procWorker, "%s: a Service for the worker, which serves nothing but metrics", overlay)

			// PodDisruptionBudgets: one per Deployment, selecting its pods,
			// and letting a node drain evict one of them at full strength.
			covered := map[string]bool{}
			for _, pdb := range o.pdbs {
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				require.NoError(t, err)
				var matched []appsv1.Deployment
				for _, d := range o.deployments {
					if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
						matched = append(matched, d)
					}
				}
				require.Len(t, matched, 1, "%s: PodDisruptionBudget %s selects %d Deployments", overlay, pdb.Name, len(matched))
				d := matched[0]
				covered[d.Name] = true
				replicas := int(ptrOr(d.Spec.Replicas, 1))
				switch {
				case pdb.Spec.MinAvailable != nil:
					minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, replicas, true)
					require.NoError(t, err)
					assert.Less(t, minAvailable, replicas, "%s: PodDisruptionBudget %s blocks every eviction of %s", overlay, pdb.Name, d.Name)
					assert.GreaterOrEqual(t, minAvailable, 1, "%s: PodDisruptionBudget %s lets every %s pod go", overlay, pdb.Name, d.Name)
				case pdb.Spec.MaxUnavailable != nil:
					maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, replicas, false)
					require.NoError(t, err)
					assert.GreaterOrEqual(t, maxUnavailable, 1, "%s: PodDisruptionBudget %s blocks every eviction of %s", overlay, pdb.Name, d.Name)
					assert.Less(t, maxUnavailable, replicas, "%s: PodDisruptionBudget %s lets every %s pod go", overlay, pdb.Name, d.Name)
				default:
					t.Errorf("%s: PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", overlay, pdb.Name)
				}
			}
			for _, d := range o.deployments {
				assert.True(t, covered[d.Name], "%s: Deployment %s has no PodDisruptionBudget", overlay, d.Name)
			}
		})
	}
}

// TestKubernetes_TemporalCredentials: each Temporal Cloud overlay gives
// every Temporal client its credential as a mounted Secret file, and the
// self-hosted one none.
func TestKubernetes_TemporalCredentials(t *testing.T) {
	want := map[string][]string{
		"self-hosted":         nil,
		"temporal-cloud":      {"TEMPORAL_API_KEY_FILE"},
		"temporal-cloud-mtls": {"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"},
	}
	for _, overlay := range overlays {
		o := buildOverlay(t, overlay)
		for _, w := range o.workloads() {
			c := w.template.Spec.Containers[0]
			p := processOf(c)
			if p == procGateway {
				continue
			}
			env := containerEnv(t, o, w.name, c)
			files := secretFiles(t, w.name, w.template.Spec, c)
			for _, v := range want[overlay] {
				f, ok := files[env[v].value]
				if assert.True(t, ok, "%s: %s: %s=%q is not a mounted Secret's file", overlay, w.name, v, env[v].value) {
					assert.NotEqual(t, "supportflow", f.secret, "%s: %s: the Temporal credential shares the application's Secret", overlay, w.name)
				}
			}
			if len(want[overlay]) == 0 {
				for v := range env {
					assert.False(t, strings.HasPrefix(v, "TEMPORAL_TLS") || strings.HasPrefix(v, "TEMPORAL_API_KEY"), "%s: %s sets %s", overlay, w.name, v)
				}
			} else {
				assert.Equal(t, "true", env["TEMPORAL_TLS"].value, "%s: %s: TLS to Temporal Cloud", overlay, w.name)
				_, port, err := net.SplitHostPort(env["TEMPORAL_ADDRESS"].value)
				assert.NoError(t, err)
				assert.Equal(t, "7233", port)
			}
		}
	}
}
