package deploy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/policy"
)

// repoRoot is the repository root, relative to this package's directory
// (where go test runs).
const repoRoot = "../.."

// process is one of the supportflow programs a container runs; each reads
// its own set of variables.
type process string

const (
	procWorker  process = "worker"
	procAPI     process = "supportflow-api"
	procGateway process = "codec-gateway"
	procStarter process = "starter" // starter ensure-schedules
)

// vars is the table of variables p reads, by name: config's tables, as
// `worker --help` prints them.
func (p process) vars() map[string]config.Var {
	var list []config.Var
	switch p {
	case procWorker:
		list = slices.Clone(config.Vars)
		for _, e := range policy.Env {
			list = append(list, config.Var{Name: e.Name, Default: e.Default.String(), Help: e.Help})
		}
	case procAPI:
		list = slices.Concat(config.Vars, config.APIVars)
	case procGateway:
		list = slices.Clone(config.GatewayVars)
	case procStarter:
		// The starter reads the connection, the task queue, the payload
		// keys and (for some commands) DATABASE_URL and SUPPORTFLOW_ACCOUNT:
		// all of them in config.Vars.
		list = slices.Clone(config.Vars)
	}
	m := map[string]config.Var{}
	for _, v := range list {
		m[v.Name] = v
	}
	return m
}

// reads reports whether p reads the variable (config's tables list the
// ones a library it links reads too, such as
// GOOGLE_APPLICATION_CREDENTIALS).
func (p process) reads(name string) bool {
	_, ok := p.vars()[name]
	return ok
}

// setEnv sets every variable p reads to env's value, or to empty (which
// supportflow treats as unset), so a loader sees exactly env.
func (p process) setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for name := range p.vars() {
		t.Setenv(name, env[name])
	}
}

// checkSecretVars checks the variables env sets for p that hold secrets:
// each is passed by reference (fromReference says how the value got there:
// a host variable, a Secret's key), never written down, and by its file
// variant wherever config has one. where names the service or container.
func checkSecretVars(t *testing.T, where string, p process, env map[string]string, fromReference func(name, value string) bool) {
	t.Helper()
	table := p.vars()
	for name, value := range env {
		v, ok := table[name]
		if !ok || !v.Secret {
			continue
		}
		if _, hasFile := table[name+"_FILE"]; hasFile {
			t.Errorf("%s: %s is passed as a value; config reads %s_FILE, so pass it as a mounted secret file", where, name, name)
			continue
		}
		if !fromReference(name, value) {
			t.Errorf("%s: the secret %s is written in the file instead of taken from a secret store", where, name)
		}
	}
}

// fixtures are stand-ins for the secret files a deployment mounts, by the
// file's base name, in the format the reader expects, so supportflow's
// loaders can run on a container's configuration.
var fixtures = map[string]string{
	"payload-keys":         "k1:3q2+7w0yZ0Vc9xL4kQ1rD8uP5sT6vW2aB3cE4fG5hI8=\n",
	"api-tokens":           "fixture-app:app:fixture-api-token-0123456789\nfixture-approver:approver:fixture-approver-token-0123456789\n",
	"supportflow.pgpass":   "*:*:supportflow:supportflow:fixture-password\n",
	"gcp-credentials.json": `{"type": "service_account"}` + "\n",
	"credentials.json":     `{"type": "service_account"}` + "\n",
	"api-key":              "fixture-temporal-api-key\n",
	"temporal-db-password": "fixture-temporal-password\n",
	"postgres-password":    "fixture-postgres-password\n",
	"console-users":        "alice $2a$14$fixturefixturefixturefixtureOu\n",
	// The application's secrets with a *_FILE variable, by the names
	// docker-compose.yml and the Kubernetes manifests mount them under.
	"zendesk-api-token":      "fixture-zendesk-token\n",
	"subscriptions-token":    "fixture-subscriptions-token\n",
	"model-api-key":          "fixture-model-key\n",
	"zendesk-webhook-secret": "fixture-webhook-secret\n",
	"codec-tokens":           "fixture-codec-token-0123456789,fixture-codec-token-next-0123456789\n",
}

// fixture returns the stand-in content of a secret file named base
// (certificates and keys are generated once per test binary).
func fixture(t *testing.T, base string) string {
	t.Helper()
	if s, ok := fixtures[base]; ok {
		return s
	}
	pki := testPKI(t)
	switch {
	case base == "ca.crt" || strings.HasSuffix(base, "ca.pem"):
		return pki.caPEM
	case base == "tls.key" || strings.HasSuffix(base, "key.pem"):
		return pki.keyPEM
	case base == "tls.crt" || strings.HasSuffix(base, ".pem"):
		return pki.certPEM
	}
	t.Fatalf("no fixture for a secret file named %q", base)
	return ""
}

// writeFixture writes the fixture for a secret file named base into dir
// and returns its path.
func writeFixture(t *testing.T, dir, base string) string {
	t.Helper()
	path := filepath.Join(dir, base)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(fixture(t, base)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type pki struct{ caPEM, certPEM, keyPEM string }

var (
	pkiOnce sync.Once
	pkiVal  pki
	pkiErr  error
)

// testPKI is a throwaway CA and a certificate it signed (for the DNS name
// temporal, usable by a client and a server), in PEM.
func testPKI(t *testing.T) pki {
	t.Helper()
	pkiOnce.Do(func() { pkiVal, pkiErr = newPKI() })
	if pkiErr != nil {
		t.Fatal(pkiErr)
	}
	return pkiVal
}

func newPKI() (pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fixture CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return pki{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "temporal"}, DNSNames: []string{"temporal"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		return pki{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return pki{}, err
	}
	enc := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return pki{caPEM: enc("CERTIFICATE", caDER), certPEM: enc("CERTIFICATE", der), keyPEM: enc("PRIVATE KEY", keyDER)}, nil
}
