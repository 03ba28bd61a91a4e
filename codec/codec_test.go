package codec_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/supportflow/supportflow/codec"
)

func newKey() string {
	b := make([]byte, codec.KeySize)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func ring(t testing.TB, entries ...string) *codec.Keyring {
	t.Helper()
	k, err := codec.ParseKeyring(strings.Join(entries, ","), "test")
	require.NoError(t, err)
	return k
}

func jsonPayload(t testing.TB, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	require.NoError(t, err)
	return p
}

// Every payload comes back exactly as it went in, its metadata included;
// what is stored holds neither its text nor its encoding, and names the
// key that sealed it.
func TestCodec_RoundTrip(t *testing.T) {
	t.Parallel()
	c := &codec.Codec{Keys: ring(t, "k1:"+newKey())}
	in := []*commonpb.Payload{
		jsonPayload(t, "Dear Ottoline, your plan is cancelled."),
		jsonPayload(t, strings.Repeat("a long and repetitive conversation ", 2000)),
		jsonPayload(t, nil),
		{Metadata: map[string][]byte{"encoding": []byte("binary/plain")}, Data: []byte{0, 1, 2, 255}},
	}
	sealed, err := c.Encode(in)
	require.NoError(t, err)
	require.Len(t, sealed, len(in))
	for i, s := range sealed {
		assert.Equal(t, codec.EncodingSealed, string(s.Metadata["encoding"]))
		assert.Equal(t, "k1", string(s.Metadata[codec.MetadataKeyID]))
		assert.Equal(t, codec.CipherName, string(s.Metadata[codec.MetadataCipher]))
		assert.NotContains(t, string(s.Data), "Ottoline")
		assert.NotContains(t, string(s.Data), "json/plain", "the original encoding is sealed too (%d)", i)
	}
	big, _ := proto.Marshal(in[1])
	assert.Less(t, len(sealed[1].Data), len(big)/10, "compressed before sealing")
	out, err := c.Decode(sealed)
	require.NoError(t, err)
	for i := range in {
		assert.True(t, proto.Equal(in[i], out[i]), "payload %d: %v != %v", i, in[i], out[i])
	}

	again, err := c.Encode(in[:1])
	require.NoError(t, err)
	assert.NotEqual(t, sealed[0].Data, again[0].Data, "a fresh nonce every time: equal texts do not look equal")
}

// Payloads written before the codec (the committed histories, runs open at
// the deploy) read as they are when unsealed payloads are admitted; by
// default they are refused (unsealed_test.go).
func TestCodec_PlainPayloadsPassThroughWhenAdmitted(t *testing.T) {
	t.Parallel()
	c := &codec.Codec{Keys: ring(t, "k1:"+newKey()), AdmitUnsealed: true}
	plain := jsonPayload(t, map[string]string{"reply": "hello"})
	out, err := c.Decode([]*commonpb.Payload{plain})
	require.NoError(t, err)
	assert.True(t, proto.Equal(plain, out[0]))
}

// A key that is no longer active still opens what it sealed; a keyring
// without it says which key is missing; an altered payload does not open.
func TestCodec_RotationAndTampering(t *testing.T) {
	t.Parallel()
	a, b := "a:"+newKey(), "b:"+newKey()
	sealedA, err := (&codec.Codec{Keys: ring(t, a)}).Encode([]*commonpb.Payload{jsonPayload(t, "sealed under a")})
	require.NoError(t, err)

	rotated := &codec.Codec{Keys: ring(t, b, a)}
	out, err := rotated.Decode(sealedA)
	require.NoError(t, err, "b is active, a still opens its payloads")
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(out[0], &s))
	assert.Equal(t, "sealed under a", s)
	sealedB, err := rotated.Encode(out)
	require.NoError(t, err)
	assert.Equal(t, "b", string(sealedB[0].Metadata[codec.MetadataKeyID]), "new payloads use the active key")

	_, err = (&codec.Codec{Keys: ring(t, b)}).Decode(sealedA)
	require.ErrorIs(t, err, codec.ErrUnknownKey)
	assert.Contains(t, err.Error(), `"a"`)

	// The key ID is bound into the seal: the same key under another ID
	// does not open it.
	k := newKey()
	twice := &codec.Codec{Keys: ring(t, "x:"+k, "y:"+k)}
	sealedX, err := twice.Encode([]*commonpb.Payload{jsonPayload(t, "bound to x")})
	require.NoError(t, err)
	sealedX[0].Metadata[codec.MetadataKeyID] = []byte("y")
	_, err = twice.Decode(sealedX)
	assert.ErrorIs(t, err, codec.ErrCorrupt, "relabelled to the same key under another ID")

	for name, alter := range map[string]func(p *commonpb.Payload){
		"a flipped bit":          func(p *commonpb.Payload) { p.Data[len(p.Data)-1] ^= 1 },
		"truncated":              func(p *commonpb.Payload) { p.Data = p.Data[:10] },
		"relabelled to key b":    func(p *commonpb.Payload) { p.Metadata[codec.MetadataKeyID] = []byte("b") },
		"another cipher claimed": func(p *commonpb.Payload) { p.Metadata[codec.MetadataCipher] = []byte("ROT13") },
	} {
		p := proto.Clone(sealedA[0]).(*commonpb.Payload)
		alter(p)
		_, err := rotated.Decode([]*commonpb.Payload{p})
		assert.ErrorIs(t, err, codec.ErrCorrupt, name)
	}
}

// Each malformed keyring gets its own error, naming the entry by position
// or ID and never showing key material.
func TestParseKeyring_BadInput(t *testing.T) {
	t.Parallel()
	good := newKey()
	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	for _, tc := range []struct{ text, want string }{
		{"", "holds no key"},
		{" , \n# only a comment\n", "holds no key"},
		{good, "entry 1 is not ID:BASE64KEY"},
		{"k1:", "entry 1 is not ID:BASE64KEY"},
		{"k1:" + good + ",bad id!:" + good, "entry 2: a key ID is 1-32 letters"},
		{base64.RawURLEncoding.EncodeToString(make([]byte, 32)) + ":k1", "entry 1: a key ID is 1-32 letters"},
		{"k1:" + good + ",k1:" + good, `key ID "k1" is given twice`},
		{"k1:not*base64*at*all", `key "k1" is not base64`},
		{"k1:" + short, `key "k1" is 16 bytes; AES-256 needs 32`},
	} {
		_, err := codec.ParseKeyring(tc.text, "SUPPORTFLOW_PAYLOAD_KEYS")
		require.ErrorIs(t, err, codec.ErrKeys, "%q", tc.text)
		assert.ErrorContains(t, err, tc.want)
		assert.ErrorContains(t, err, "SUPPORTFLOW_PAYLOAD_KEYS", "the error names where the keys came from")
		assert.NotContains(t, err.Error(), good)
		assert.NotContains(t, err.Error(), short)
		assert.NotContains(t, err.Error(), base64.RawURLEncoding.EncodeToString(make([]byte, 32)), "a key written where its ID belongs is not quoted")
	}
	k, err := codec.ParseKeyring("# rotated 2026-12\nnew:"+good+"\n\nold:"+base64.RawURLEncoding.EncodeToString(make([]byte, 32))+"\n", "file")
	require.NoError(t, err, "a file: comments, blank lines, URL-safe unpadded base64")
	assert.Equal(t, "new", k.ActiveID())
	assert.Equal(t, []string{"new", "old"}, k.IDs())
}

// The keyring comes from exactly one of the two variables.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	key := "k1:" + newKey()
	file := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(file, []byte(key+"\n"), 0o600))
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	_, err := codec.FromEnv(env(nil))
	assert.ErrorContains(t, err, "SUPPORTFLOW_PAYLOAD_KEYS (or SUPPORTFLOW_PAYLOAD_KEYS_FILE) is required")
	_, err = codec.FromEnv(env(map[string]string{codec.EnvKeys: key, codec.EnvKeysFile: file}))
	assert.ErrorContains(t, err, "not both")
	_, err = codec.FromEnv(env(map[string]string{codec.EnvKeysFile: file + ".missing"}))
	assert.ErrorContains(t, err, codec.EnvKeysFile)
	k, err := codec.FromEnv(env(map[string]string{codec.EnvKeysFile: file}))
	require.NoError(t, err)
	assert.Equal(t, "k1", k.ActiveID())
	k, err = codec.FromEnv(env(map[string]string{codec.EnvKeys: key}))
	require.NoError(t, err)
	assert.Equal(t, "k1", k.ActiveID())
}

// The gateway adds the codec token to what it forwards, and nothing to a
// CORS preflight (which carries none by design).
func TestGateway_AddsTheToken(t *testing.T) {
	t.Parallel()
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, fmt.Sprintf("%s %s auth=%q origin=%q", r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Origin")))
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	gw := httptest.NewServer(codec.Gateway(u, "codec-token-0123456789"))
	defer gw.Close()
	resp, err := http.Post(gw.URL+"/tickets/1/drafts", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "only /codec/ is forwarded")
	for _, method := range []string{"OPTIONS", "POST"} {
		req, _ := http.NewRequest(method, gw.URL+"/codec/decode", strings.NewReader("{}"))
		req.Header.Set("Origin", "http://localhost:8233")
		req.Header.Set("Authorization", "Bearer what-the-browser-sent")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, []string{
		`OPTIONS /codec/decode auth="Bearer what-the-browser-sent" origin="http://localhost:8233"`,
		`POST /codec/decode auth="Bearer codec-token-0123456789" origin="http://localhost:8233"`,
	}, seen)
}

// The gateway answers its health check itself: 200 "ok" to GET, with no
// token and no call to the upstream (here one that fails every request, as
// an API that is down would), so its probes do not follow the API's.
func TestGateway_Healthz(t *testing.T) {
	t.Parallel()
	var upstreamCalls []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls = append(upstreamCalls, r.Method+" "+r.URL.Path)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	gw := httptest.NewServer(codec.Gateway(u, "codec-token-0123456789"))
	defer gw.Close()

	do := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, gw.URL+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	resp, body := do(http.MethodGet, codec.GatewayHealthPath)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok", body)
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	resp, body = do(http.MethodHead, codec.GatewayHealthPath)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, body)
	resp, _ = do(http.MethodPost, codec.GatewayHealthPath)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
	// Only that path: the rest of the gateway is unchanged.
	for _, path := range []string{"/healthz/", "/readyz", "/codec"} {
		resp, _ = do(http.MethodGet, path)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "GET %s", path)
	}
	assert.Empty(t, upstreamCalls, "the health check must not reach the upstream")
	resp, _ = do(http.MethodPost, "/codec/decode")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the upstream's answer to a codec request")
	assert.Equal(t, []string{"POST /codec/decode"}, upstreamCalls)
}

// BenchmarkCodec measures sealing and opening one payload the size of a
// reply (1 KiB) and of a long conversation (256 KiB of text).
//
//	go test ./codec -run '^$' -bench . -benchmem
func BenchmarkCodec(b *testing.B) {
	c := &codec.Codec{Keys: ring(b, "k1:"+newKey())}
	// English-like text: words drawn at random from a small vocabulary
	// (real conversations compress about as well, 3-4x).
	words := strings.Fields("the customer asked us to cancel their plan and refund the last box which arrived late and damaged " +
		"please could you help me with my order subscription delivery payment account thanks hello sorry week month " +
		"again still not yet charged twice address change skip pause resume card email name number")
	var seed [1]byte
	for _, size := range []int{1 << 10, 256 << 10} {
		var sb strings.Builder
		for sb.Len() < size {
			_, _ = rand.Read(seed[:])
			sb.WriteString(words[int(seed[0])%len(words)] + " ")
		}
		p := jsonPayload(b, sb.String())
		sealed, err := c.Encode([]*commonpb.Payload{p})
		require.NoError(b, err)
		b.Run(fmt.Sprintf("encode/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(p.Data)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.Encode([]*commonpb.Payload{p})
			}
			b.ReportMetric(float64(len(sealed[0].Data))/float64(len(p.Data)), "stored/original")
		})
		b.Run(fmt.Sprintf("decode/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(p.Data)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.Decode(sealed)
			}
		})
	}
}
