package temporalconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// selfSigned writes a certificate and its key as PEM files.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}

func TestFromEnv_Defaults(t *testing.T) {
	t.Parallel()
	s, err := FromEnv(env(nil))
	require.NoError(t, err)
	assert.Equal(t, Settings{Address: DefaultAddress, Namespace: DefaultNamespace}, s)
	var o client.Options
	require.NoError(t, s.Apply(&o))
	assert.Nil(t, o.ConnectionOptions.TLS, "an open frontend gets plain text")
	assert.Nil(t, o.Credentials)
}

// An API key alone is Temporal Cloud's way: TLS with the system roots.
func TestFromEnv_APIKeyTurnsTLSOn(t *testing.T) {
	t.Parallel()
	s, err := FromEnv(env(map[string]string{EnvAddress: "us-east-1.aws.api.temporal.io:7233", EnvNamespace: "ns.acct", EnvAPIKey: "k-secret"}))
	require.NoError(t, err)
	assert.True(t, s.TLS)
	var o client.Options
	require.NoError(t, s.Apply(&o))
	require.NotNil(t, o.ConnectionOptions.TLS)
	assert.Nil(t, o.ConnectionOptions.TLS.RootCAs, "system roots")
	require.NotNil(t, o.Credentials)
	assert.NotContains(t, fmt.Sprint(s.Describe()...), "k-secret", "the key is never described")

	// TEMPORAL_TLS=false keeps plain text (a local proxy that terminates TLS).
	s, err = FromEnv(env(map[string]string{EnvAPIKey: "k", EnvTLS: "false"}))
	require.NoError(t, err)
	assert.False(t, s.TLS)
}

// The key file is read when the credential is needed and again after it
// changes (a rotated secret), keeping the last good key while the new file
// is being written.
func TestAPIKeyFile_ReadAgainWhenChanged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(path, []byte("first\n"), 0o600))
	s, err := FromEnv(env(map[string]string{EnvAPIKeyFile: path}))
	require.NoError(t, err)
	f := apiKeyFile(path)
	k, err := f(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "first", k)
	require.NoError(t, os.WriteFile(path, []byte("second-longer\n"), 0o600))
	k, err = f(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "second-longer", k)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	k, err = f(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "second-longer", k, "an empty file mid-rotation keeps the last key")
	assert.True(t, s.TLS, "an API key turns TLS on")
}

// Each bad input gets an error naming the variable, never its value.
func TestFromEnv_BadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, "client")
	otherCert, _ := selfSigned(t, dir, "other")
	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"cert without key":      {map[string]string{EnvClientCertPath: cert}, EnvClientKeyPath},
		"key without cert":      {map[string]string{EnvClientKeyPath: key}, EnvClientCertPath},
		"path and data":         {map[string]string{EnvClientCertPath: cert, EnvClientCertData: "PEM", EnvClientKeyPath: key}, EnvClientCertData},
		"missing cert file":     {map[string]string{EnvClientCertPath: filepath.Join(dir, "nope"), EnvClientKeyPath: key}, EnvClientCertPath},
		"key of another cert":   {map[string]string{EnvClientCertPath: otherCert, EnvClientKeyPath: key}, "client certificate"},
		"CA not PEM":            {map[string]string{EnvServerCACertPath: junk}, EnvServerCACertPath},
		"CA file missing":       {map[string]string{EnvServerCACertPath: filepath.Join(dir, "nope")}, EnvServerCACertPath},
		"TLS not a bool":        {map[string]string{EnvTLS: "yes please"}, EnvTLS},
		"TLS off beside a cert": {map[string]string{EnvTLS: "false", EnvClientCertPath: cert, EnvClientKeyPath: key}, EnvTLS},
		"key both ways":         {map[string]string{EnvAPIKey: "k", EnvAPIKeyFile: empty}, EnvAPIKeyFile},
		"empty key file":        {map[string]string{EnvAPIKeyFile: empty}, "empty"},
		"host verification":     {map[string]string{EnvDisableHostVerification: "maybe"}, EnvDisableHostVerification},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromEnv(env(tc.env))
			require.ErrorIs(t, err, ErrConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "BEGIN", "no PEM in errors")
		})
	}
}

// mTLS settings give a TLS config whose client certificate is the pair's,
// read again when the files change.
func TestTLSConfig_ClientCertificateReloaded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, "client")
	ca, _ := selfSigned(t, dir, "ca")
	s, err := FromEnv(env(map[string]string{EnvClientCertPath: cert, EnvClientKeyPath: key, EnvServerCACertPath: ca, EnvServerName: "temporal.internal"}))
	require.NoError(t, err)
	cfg, err := s.TLSConfig()
	require.NoError(t, err)
	assert.Equal(t, "temporal.internal", cfg.ServerName)
	require.NotNil(t, cfg.RootCAs)
	first, err := cfg.GetClientCertificate(nil)
	require.NoError(t, err)

	// Renewed in place (as cert-manager does): the next handshake uses it.
	time.Sleep(10 * time.Millisecond)
	newCert, newKey := selfSigned(t, t.TempDir(), "client")
	for src, dst := range map[string]string{newCert: cert, newKey: key} {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, b, 0o600))
	}
	second, err := cfg.GetClientCertificate(nil)
	require.NoError(t, err)
	assert.NotEqual(t, first.Certificate[0], second.Certificate[0], "the renewed certificate is used")
}
