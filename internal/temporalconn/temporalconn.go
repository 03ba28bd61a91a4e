// Package temporalconn is how every supportflow process reaches Temporal:
// the frontend's address and namespace, TLS (a server CA, a client
// certificate for mutual TLS, a server name) and an API key (Temporal
// Cloud's credential), read from the environment under the names Temporal's
// own tools use (the Go SDK's envconfig and the CLI), so one set of
// variables configures supportflow and `temporal` alike:
// https://docs.temporal.io/develop/environment-configuration
//
// Files are re-read when they change: a client certificate at each TLS
// handshake and the API key file (TEMPORAL_API_KEY_FILE) at each call, so a
// rotated Kubernetes secret or a cert-manager renewal takes effect without a
// restart. Secret values are never put into errors or logs; Describe says
// what is safe to print.
package temporalconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/supportflow/supportflow/codec"
)

// The environment variables, as Temporal's environment configuration names
// them (TEMPORAL_API_KEY_FILE is supportflow's, for a mounted secret).
const (
	EnvAddress                 = "TEMPORAL_ADDRESS"
	EnvNamespace               = "TEMPORAL_NAMESPACE"
	EnvAPIKey                  = "TEMPORAL_API_KEY"
	EnvAPIKeyFile              = "TEMPORAL_API_KEY_FILE"
	EnvTLS                     = "TEMPORAL_TLS"
	EnvClientCertPath          = "TEMPORAL_TLS_CLIENT_CERT_PATH"
	EnvClientCertData          = "TEMPORAL_TLS_CLIENT_CERT_DATA"
	EnvClientKeyPath           = "TEMPORAL_TLS_CLIENT_KEY_PATH"
	EnvClientKeyData           = "TEMPORAL_TLS_CLIENT_KEY_DATA"
	EnvServerCACertPath        = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
	EnvServerCACertData        = "TEMPORAL_TLS_SERVER_CA_CERT_DATA"
	EnvServerName              = "TEMPORAL_TLS_SERVER_NAME"
	EnvDisableHostVerification = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
)

// Defaults of the address and namespace.
const (
	DefaultAddress   = "localhost:7233"
	DefaultNamespace = "default"
)

// Var documents one variable (for a process's --help and the docs).
type Var struct {
	Name, Default, Help string
	Secret              bool
}

// Vars lists the variables Settings reads.
var Vars = []Var{
	{Name: EnvAddress, Default: DefaultAddress, Help: "Temporal frontend host:port (Temporal Cloud: <namespace>.<account>.tmprl.cloud:7233 with mTLS, or the regional endpoint such as us-east-1.aws.api.temporal.io:7233 with an API key)"},
	{Name: EnvNamespace, Default: DefaultNamespace, Help: "Temporal namespace (Temporal Cloud: <namespace>.<account>)"},
	{Name: EnvAPIKey, Help: "Temporal API key, sent as the Authorization bearer credential (Temporal Cloud); turns TLS on unless TEMPORAL_TLS=false", Secret: true},
	{Name: EnvAPIKeyFile, Help: "file holding the Temporal API key instead (a mounted secret), re-read when it changes"},
	{Name: EnvTLS, Help: "true or false: TLS to the frontend; default on when a TLS setting or an API key is given, off otherwise"},
	{Name: EnvClientCertPath, Help: "client certificate (PEM) for mutual TLS, re-read when it changes"},
	{Name: EnvClientCertData, Help: "client certificate PEM inline instead", Secret: true},
	{Name: EnvClientKeyPath, Help: "client certificate's private key (PEM file, a mounted secret), re-read when it changes"},
	{Name: EnvClientKeyData, Help: "client private key PEM inline instead", Secret: true},
	{Name: EnvServerCACertPath, Help: "CA certificate(s) (PEM) the frontend's certificate must chain to; default the system roots"},
	{Name: EnvServerCACertData, Help: "server CA PEM inline instead"},
	{Name: EnvServerName, Help: "name the frontend's certificate must carry; default the host of TEMPORAL_ADDRESS"},
	{Name: EnvDisableHostVerification, Default: "false", Help: "true skips verifying the frontend's certificate (testing only)"},
}

// ErrConfig is wrapped by every error about the settings.
var ErrConfig = errors.New("temporal connection")

// Settings are how one process connects to Temporal.
type Settings struct {
	Address, Namespace string
	// APIKey, or APIKeyFile (re-read when it changes), is the bearer
	// credential.
	APIKey, APIKeyFile string
	// TLS is on when true; FromEnv decides it (see EnvTLS).
	TLS bool
	// ClientCert and ClientKey are the mTLS pair, each a file path or PEM
	// data (CertPEM/KeyPEM); empty without mutual TLS.
	ClientCertPath, ClientKeyPath string
	ClientCertPEM, ClientKeyPEM   []byte
	// ServerCAPEM is the CA bundle the frontend's certificate must chain
	// to; nil trusts the system roots.
	ServerCAPEM             []byte
	ServerName              string
	DisableHostVerification bool
}

// Plain is the settings of an open frontend at address (tests, the dev
// server).
func Plain(address, namespace string) Settings {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return Settings{Address: address, Namespace: namespace}
}

// FromEnv reads the settings from getenv (os.Getenv in production). Every
// problem is reported, by variable name, never with a value: a certificate
// without its key, a setting given both as a path and as data, an
// unreadable or malformed PEM file, TEMPORAL_TLS=false beside TLS files, an
// API key given both inline and as a file.
func FromEnv(getenv func(string) string) (Settings, error) {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	s := Settings{Address: get(EnvAddress), Namespace: get(EnvNamespace)}
	if s.Address == "" {
		s.Address = DefaultAddress
	}
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	s.APIKey, s.APIKeyFile = getenv(EnvAPIKey), get(EnvAPIKeyFile)
	s.APIKey = strings.TrimSpace(s.APIKey)
	if s.APIKey != "" && s.APIKeyFile != "" {
		bad("set %s or %s, not both", EnvAPIKey, EnvAPIKeyFile)
	}
	if s.APIKeyFile != "" {
		if _, err := readAPIKey(s.APIKeyFile); err != nil {
			bad("%s: %v", EnvAPIKeyFile, err)
		}
	}
	pathOrData := func(pathVar, dataVar string) (path string, data []byte) {
		path, d := get(pathVar), getenv(dataVar)
		if path != "" && strings.TrimSpace(d) != "" {
			bad("set %s or %s, not both", pathVar, dataVar)
		}
		if strings.TrimSpace(d) != "" {
			data = []byte(d)
		}
		return path, data
	}
	s.ClientCertPath, s.ClientCertPEM = pathOrData(EnvClientCertPath, EnvClientCertData)
	s.ClientKeyPath, s.ClientKeyPEM = pathOrData(EnvClientKeyPath, EnvClientKeyData)
	caPath, caData := pathOrData(EnvServerCACertPath, EnvServerCACertData)
	s.ServerName = get(EnvServerName)
	if v := get(EnvDisableHostVerification); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad("%s must be true or false", EnvDisableHostVerification)
		}
		s.DisableHostVerification = b
	}
	hasCert := s.ClientCertPath != "" || s.ClientCertPEM != nil
	hasKey := s.ClientKeyPath != "" || s.ClientKeyPEM != nil
	if hasCert != hasKey {
		bad("a client certificate needs its key: set both %s and %s (or the _DATA variants)", EnvClientCertPath, EnvClientKeyPath)
	}
	if caPath != "" {
		b, err := os.ReadFile(caPath)
		if err != nil {
			bad("%s: cannot read the file: %v", EnvServerCACertPath, errors.Unwrap(err))
		}
		caData = b
	}
	if caData != nil {
		if !x509.NewCertPool().AppendCertsFromPEM(caData) {
			bad("%s holds no PEM certificate", caVarName(caPath))
		}
		s.ServerCAPEM = caData
	}
	anyTLS := hasCert || hasKey || s.ServerCAPEM != nil || s.ServerName != "" || s.DisableHostVerification
	s.TLS = anyTLS || s.APIKey != "" || s.APIKeyFile != ""
	if v := get(EnvTLS); v != "" {
		b, err := strconv.ParseBool(v)
		switch {
		case err != nil:
			bad("%s must be true or false", EnvTLS)
		case !b && anyTLS:
			bad("%s=false contradicts the TLS settings given (client certificate, CA, server name)", EnvTLS)
		default:
			// An API key over plain TLS=false is allowed (a local proxy
			// terminating TLS), as Temporal's own tools allow it.
			s.TLS = b
		}
	}
	if hasCert && hasKey && len(errs) == 0 {
		if _, err := s.loadClientCert(); err != nil {
			bad("client certificate: %v", err)
		}
	}
	return s, errors.Join(errs...)
}

func caVarName(path string) string {
	if path != "" {
		return EnvServerCACertPath
	}
	return EnvServerCACertData
}

// ClientOptions is the one way supportflow's processes build the options
// of a Temporal client: the connection (address, namespace, TLS,
// credentials), payloads sealed with keys and opened with them (payloads
// that are not sealed refused unless opts admit them: codec.Apply), and
// the SDK's log lines sent to logger. The worker adds its telemetry on top
// (workerapp.ClientOptions).
func (s Settings) ClientOptions(logger log.Logger, keys *codec.Keyring, opts ...codec.Option) (client.Options, error) {
	o := client.Options{Logger: logger}
	if err := s.Apply(&o); err != nil {
		return o, err
	}
	codec.Apply(&o, keys, opts...)
	return o, nil
}

// Apply sets o's address, namespace, TLS and credentials.
func (s Settings) Apply(o *client.Options) error {
	o.HostPort, o.Namespace = s.Address, s.Namespace
	if s.TLS {
		cfg, err := s.TLSConfig()
		if err != nil {
			return err
		}
		o.ConnectionOptions.TLS = cfg
	} else {
		o.ConnectionOptions.TLS = nil
		o.ConnectionOptions.TLSDisabled = true
	}
	switch {
	case s.APIKeyFile != "":
		o.Credentials = client.NewAPIKeyDynamicCredentials(apiKeyFile(s.APIKeyFile))
	case s.APIKey != "":
		o.Credentials = client.NewAPIKeyStaticCredentials(s.APIKey)
	}
	return nil
}

// TLSConfig is the TLS configuration of the connection (nil error, nil
// config when TLS is off).
func (s Settings) TLSConfig() (*tls.Config, error) {
	if !s.TLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName, InsecureSkipVerify: s.DisableHostVerification}
	if s.ServerCAPEM != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.ServerCAPEM) {
			return nil, fmt.Errorf("%w: the server CA holds no PEM certificate", ErrConfig)
		}
		cfg.RootCAs = pool
	}
	if s.ClientCertPath != "" || s.ClientCertPEM != nil {
		if _, err := s.loadClientCert(); err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrConfig, err)
		}
		cert := &reloading[*tls.Certificate]{paths: []string{s.ClientCertPath, s.ClientKeyPath}, load: func() (*tls.Certificate, error) {
			c, err := s.loadClientCert()
			return &c, err
		}}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert.get() }
	}
	return cfg, nil
}

// Describe is what may be logged about the connection: no secret.
func (s Settings) Describe() []any {
	mtls := s.ClientCertPath != "" || s.ClientCertPEM != nil
	apiKey := "none"
	switch {
	case s.APIKeyFile != "":
		apiKey = "file"
	case s.APIKey != "":
		apiKey = "set"
	}
	return []any{"temporal", s.Address, "namespace", s.Namespace, "temporal_tls", s.TLS, "temporal_mtls", mtls, "temporal_api_key", apiKey}
}

func (s Settings) loadClientCert() (tls.Certificate, error) {
	certPEM, keyPEM := s.ClientCertPEM, s.ClientKeyPEM
	var err error
	if s.ClientCertPath != "" {
		if certPEM, err = os.ReadFile(s.ClientCertPath); err != nil {
			return tls.Certificate{}, fmt.Errorf("%s: cannot read the file: %v", EnvClientCertPath, errors.Unwrap(err))
		}
	}
	if s.ClientKeyPath != "" {
		if keyPEM, err = os.ReadFile(s.ClientKeyPath); err != nil {
			return tls.Certificate{}, fmt.Errorf("%s: cannot read the file: %v", EnvClientKeyPath, errors.Unwrap(err))
		}
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// tls's messages name the problem (no PEM, mismatched key) and
		// never quote the key.
		return tls.Certificate{}, err
	}
	return c, nil
}

// reloading is a value read from files, read again when one of them
// changes, so a renewed certificate or a rotated key is used from the next
// handshake or call. A read that fails after one succeeded (a file caught
// half written) keeps the last good value.
type reloading[T any] struct {
	paths []string
	load  func() (T, error)

	mu    sync.Mutex
	stamp string
	ok    bool
	v     T
}

func (r *reloading[T]) get() (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var stamp strings.Builder
	for _, p := range r.paths {
		stamp.WriteString(fileStamp(p) + "|")
	}
	if r.ok && stamp.String() == r.stamp {
		return r.v, nil
	}
	v, err := r.load()
	if err != nil {
		if r.ok {
			return r.v, nil
		}
		return v, err
	}
	r.v, r.stamp, r.ok = v, stamp.String(), true
	return v, nil
}

// apiKeyFile is the API key credential read from the file at path, read
// again when it changes.
func apiKeyFile(path string) func(context.Context) (string, error) {
	r := &reloading[string]{paths: []string{path}, load: func() (string, error) {
		k, err := readAPIKey(path)
		if err != nil {
			return "", fmt.Errorf("%w: %s: %v", ErrConfig, EnvAPIKeyFile, err)
		}
		return k, nil
	}}
	return func(context.Context) (string, error) { return r.get() }
}

func readAPIKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read the file: %v", errors.Unwrap(err))
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", errors.New("the file is empty")
	}
	return k, nil
}

// fileStamp changes when the file at path is replaced or rewritten ("" for
// no path). Kubernetes swaps a secret volume's symlink, which Stat follows.
func fileStamp(path string) string {
	if path == "" {
		return ""
	}
	st, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return st.ModTime().Format(time.RFC3339Nano) + "/" + strconv.FormatInt(st.Size(), 10)
}
