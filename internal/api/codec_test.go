package api_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/ledger"
)

const testCodecToken = "codec-token-0123456789"

// codecServer builds the API with its codec server over c and nothing
// else behind it.
func codecServer(t *testing.T, c *codec.Codec) *api.Server {
	t.Helper()
	srv, err := api.New(api.Config{Tokens: []api.Token{{Name: "app", Roles: []api.Role{api.RoleApp}, Secret: "app-token-0123456789"}},
		WebhookSecret: "webhook-secret", ZendeskUserID: 1, Codec: c, CodecTokens: []string{testCodecToken}, Namespace: "default"},
		nil, ledger.New(nil, "acme"), nil, nil, slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

func postPayloads(t *testing.T, srv http.Handler, path, token string, payloads ...*commonpb.Payload) (int, []byte) {
	t.Helper()
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: payloads})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// As mounted by the API: a codec token decodes (old, unsealed histories
// included) but cannot seal anything unless SUPPORTFLOW_CODEC_ALLOW_ENCODE
// enabled encoding; without a token, encode is 401 before anything else.
func TestCodecServer_DecodesAndEncodesOnlyWhenAllowed(t *testing.T) {
	key := make([]byte, codec.KeySize)
	_, _ = rand.Read(key)
	keys, err := codec.ParseKeyring("k1:"+base64.StdEncoding.EncodeToString(key), "test")
	require.NoError(t, err)
	plain := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`{"ticket_id":42}`)}

	srv := codecServer(t, &codec.Codec{Keys: keys})
	code, body := postPayloads(t, srv, "/codec/encode", testCodecToken, plain)
	require.Equal(t, http.StatusForbidden, code, "%s", body)
	var p api.Problem
	require.NoError(t, json.Unmarshal(body, &p))
	assert.Equal(t, "/problems/encode-disabled", p.Type)
	assert.Contains(t, p.Detail, codec.EnvAllowEncode)
	code, _ = postPayloads(t, srv, "/codec/encode", "", plain)
	assert.Equal(t, http.StatusUnauthorized, code, "no token: 401, whatever the setting")

	code, body = postPayloads(t, srv, "/codec/decode", testCodecToken, plain)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var out commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(body, &out))
	require.Len(t, out.Payloads, 1)
	assert.True(t, proto.Equal(plain, out.Payloads[0]), "an unsealed payload is shown as it is")

	srv = codecServer(t, &codec.Codec{Keys: keys, AllowEncode: true})
	code, body = postPayloads(t, srv, "/codec/encode", testCodecToken, plain)
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.NoError(t, protojson.Unmarshal(body, &out))
	require.Len(t, out.Payloads, 1)
	assert.Equal(t, codec.EncodingSealed, string(out.Payloads[0].Metadata["encoding"]))
	code, body = postPayloads(t, srv, "/codec/decode", testCodecToken, out.Payloads[0])
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.NoError(t, protojson.Unmarshal(body, &out))
	assert.True(t, proto.Equal(plain, out.Payloads[0]))
}
