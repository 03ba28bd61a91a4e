package tests

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/devenv"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/temporalconn"
	"github.com/supportflow/supportflow/internal/testenv"
)

// These tests start their own Temporal server on PostgreSQL, secured, so
// they run once, in the pass that starts its own servers: against a
// long-lived server of the caller's (TEMPORAL_ADDRESS) they would only
// repeat themselves.
func skipOnExternalServer(t *testing.T) {
	if os.Getenv("TEMPORAL_ADDRESS") != "" {
		t.Skip("starts its own secured Temporal server; runs in the pass without TEMPORAL_ADDRESS")
	}
}

// startSecureServer runs the Temporal server on PostgreSQL (what compose
// deploys) with the frontend secured by tls and, with jwks, authorization;
// connect is how the setup client (namespace, search attributes) reaches it.
func startSecureServer(t *testing.T, tls *devenv.ServerTLS, jwks string, connect temporalconn.Settings) *devenv.Temporal {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logf, err := os.CreateTemp("", "supportflow-secure-temporal-*.log")
	require.NoError(t, err)
	srv, err := devenv.StartTemporalServer(ctx, devenv.TemporalServerOptions{
		PostgresURL: testenv.DatabaseURL(t), SearchAttributes: supportflow.SearchAttributes,
		Log: logf, Progress: os.Stderr, TLS: tls, JWKSFile: jwks, Connect: connect,
	})
	if err != nil {
		t.Logf("server log kept at %s", logf.Name())
		logf.Close()
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_ = srv.Stop()
		logf.Close()
		if t.Failed() {
			t.Logf("server log kept at %s", logf.Name())
			return
		}
		os.Remove(logf.Name())
	})
	return srv
}

// A frontend that requires client certificates (mutual TLS) admits only a
// client with one signed by its CA; with the certificate from the
// environment (TEMPORAL_TLS_*), the whole execution path runs: the worker
// process, the starter and the ledger, one comment and one cancellation.
func TestTemporal_MutualTLS(t *testing.T) {
	skipOnExternalServer(t)
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	settings := func(withCert bool) temporalconn.Settings {
		env := map[string]string{
			temporalconn.EnvServerCACertPath: pki.caFile,
			temporalconn.EnvServerName:       "localhost",
		}
		if withCert {
			env[temporalconn.EnvClientCertPath], env[temporalconn.EnvClientKeyPath] = pki.clientCert, pki.clientKey
		}
		s, err := temporalconn.FromEnv(func(k string) string { return env[k] })
		require.NoError(t, err)
		return s
	}
	srv := startSecureServer(t, &devenv.ServerTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey,
		ClientCAFile: pki.caFile, RequireClientAuth: true}, "", settings(true))

	t.Run("refused without a client certificate", func(t *testing.T) {
		conn := settings(false)
		conn.Address = srv.Address
		assert.Error(t, describe(t, conn), "TLS without a client certificate is refused")
		assert.Error(t, describe(t, temporalconn.Plain(srv.Address, "")), "plain text is refused")
		// A certificate from another CA is refused too.
		other := newTestPKI(t, t.TempDir())
		conn.ClientCertPath, conn.ClientKeyPath = other.clientCert, other.clientKey
		assert.Error(t, describe(t, conn), "a client certificate from another CA is refused")
	})

	conn := settings(true)
	conn.Address = srv.Address
	require.NoError(t, describe(t, conn), "the client with its certificate is admitted")
	s := newStackOn(t, &conn, []string{
		"TEMPORAL_ADDRESS=" + srv.Address,
		temporalconn.EnvServerCACertPath + "=" + pki.caFile,
		temporalconn.EnvClientCertPath + "=" + pki.clientCert,
		temporalconn.EnvClientKeyPath + "=" + pki.clientKey,
		temporalconn.EnvServerName + "=localhost",
	})
	runOneExecution(t, s, "mtls")
}

// A frontend that authorizes every call by its bearer token (Temporal
// Cloud's API keys; here a JWT signed by a key the server trusts) refuses a
// client without one or with a forged one, and admits the worker given the
// key in a file (TEMPORAL_API_KEY_FILE) and the starter given it inline
// (TEMPORAL_API_KEY): the key reaches the frontend, which checks it.
func TestTemporal_APIKey(t *testing.T) {
	skipOnExternalServer(t)
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	signer, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, "supportflow-test", &signer.PublicKey)
	adminKey := signJWT(t, signer, "supportflow-test", []string{"temporal-system:admin", "default:admin"})
	workerKey := signJWT(t, signer, "supportflow-test", []string{"default:write"})
	keyFile := filepath.Join(dir, "temporal-api-key")
	require.NoError(t, os.WriteFile(keyFile, []byte(workerKey+"\n"), 0o600))

	settings := func(env map[string]string) temporalconn.Settings {
		env[temporalconn.EnvServerCACertPath] = pki.caFile
		env[temporalconn.EnvServerName] = "localhost"
		s, err := temporalconn.FromEnv(func(k string) string { return env[k] })
		require.NoError(t, err)
		return s
	}
	srv := startSecureServer(t, &devenv.ServerTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey}, jwks,
		settings(map[string]string{temporalconn.EnvAPIKey: adminKey}))
	at := func(s temporalconn.Settings) temporalconn.Settings { s.Address = srv.Address; return s }

	t.Run("refused without the key", func(t *testing.T) {
		var denied *serviceerror.PermissionDenied
		err := describe(t, at(settings(map[string]string{})))
		assert.ErrorAs(t, err, &denied, "no key: %v", err)
		forger, ferr := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, ferr)
		forged := signJWT(t, forger, "supportflow-test", []string{"temporal-system:admin", "default:admin"})
		err = describe(t, at(settings(map[string]string{temporalconn.EnvAPIKey: forged})))
		assert.ErrorAs(t, err, &denied, "a key the server did not issue: %v", err)
	})

	conn := at(settings(map[string]string{temporalconn.EnvAPIKey: workerKey}))
	require.NoError(t, describe(t, conn), "the key is admitted")
	s := newStackOn(t, &conn, []string{
		"TEMPORAL_ADDRESS=" + srv.Address,
		temporalconn.EnvServerCACertPath + "=" + pki.caFile,
		temporalconn.EnvServerName + "=localhost",
		temporalconn.EnvAPIKeyFile + "=" + keyFile,
	})
	runOneExecution(t, s, "apikey")
}

// runOneExecution approves a reply with one cancellation and checks that
// it ran exactly once.
func runOneExecution(t *testing.T, s *stack, id string) {
	t.Helper()
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Please cancel"})
	s.own(ticket, "cust-1", "sub-1")
	s.startWorker()
	s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Your plan is cancelled.", "sub-1")}})
	statuses, err := s.wait(id)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, 1, s.zd.CommentCount(ticket), "exactly one comment")
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"), "exactly one cancellation")
}

// describe dials with conn and describes the namespace: nil when the
// frontend admits the client.
func describe(t *testing.T, conn temporalconn.Settings) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	o := client.Options{Logger: quietLogger{}}
	require.NoError(t, conn.Apply(&o))
	c, err := client.DialContext(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: conn.Namespace})
	return err
}

// testPKI is a CA, a server certificate for localhost and 127.0.0.1, and a
// client certificate, as PEM files.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "supportflow test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := testPKI{caFile: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

// writeJWKS writes a JSON Web Key Set holding pub under kid (RFC 7517).
func writeJWKS(t *testing.T, path, kid string, pub *rsa.PublicKey) {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	set := map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}}
	b, err := json.Marshal(set)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// signJWT is an RS256 JSON Web Token (RFC 7519) carrying Temporal's
// "permissions" claim, valid for an hour.
func signJWT(t *testing.T, key *rsa.PrivateKey, kid string, permissions []string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now()
	signing := enc(map[string]string{"alg": "RS256", "typ": "JWT", "kid": kid}) + "." +
		enc(map[string]any{"sub": "supportflow-test", "permissions": permissions, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	require.NoError(t, err)
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}
