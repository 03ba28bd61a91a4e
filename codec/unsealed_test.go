package codec_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/supportflow/supportflow/codec"
)

type draftInput struct {
	TicketID int64  `json:"ticket_id"`
	Note     string `json:"note"`
}

// A plain input, as `temporal workflow start --input '{...}'` or any
// client without supportflow's converter sends it.
func forged(t *testing.T) *commonpb.Payloads {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayloads(draftInput{TicketID: 42, Note: "Ottoline's secret plan"})
	require.NoError(t, err)
	return p
}

// requireUnsealed checks err is the refusal of an unsealed payload: it
// wraps ErrUnsealed, asks for a workflow task retry (not a failed
// workflow), says how to start workflows and which setting admits such
// payloads, and never quotes the payload's data.
func requireUnsealed(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, codec.ErrUnsealed, msgAndArgs...)
	var taskFailure *converter.WorkflowTaskFailureError
	assert.True(t, errors.As(err, &taskFailure), "a workflow task meeting it fails and is retried: %v", err)
	for _, want := range []string{"payload is not sealed", "starter", "HTTP API", codec.EnvAdmitUnsealed + "=true"} {
		assert.ErrorContains(t, err, want, msgAndArgs...)
	}
	assert.NotContains(t, err.Error(), "Ottoline", "the payload's data is never quoted")
}

// The converter a worker or client gets by default refuses every payload
// that is not sealed, whatever its encoding, and reads everything
// supportflow's own converter makes: values, nil values ("binary/null",
// sealed like the rest), no values at all, and failures.
func TestDataConverter_RefusesUnsealedByDefault(t *testing.T) {
	t.Parallel()
	keys := ring(t, "k1:"+newKey())
	dc := codec.DataConverter(keys)

	var in draftInput
	err := dc.FromPayloads(forged(t), &in)
	requireUnsealed(t, err, "a plain JSON input")
	assert.ErrorContains(t, err, `its encoding is "json/plain"`)
	assert.Zero(t, in, "nothing was decoded")
	requireUnsealed(t, dc.FromPayload(forged(t).Payloads[0], &in), "one plain payload")

	null, err := converter.GetDefaultDataConverter().ToPayload(nil)
	require.NoError(t, err)
	require.Equal(t, "binary/null", string(null.Metadata["encoding"]))
	requireUnsealed(t, dc.FromPayload(null, &in), "a plain binary/null starts a workflow with a zero input just the same")

	err = dc.FromPayload(&commonpb.Payload{}, &in)
	requireUnsealed(t, err, "an empty payload")
	assert.ErrorContains(t, err, "it has no encoding")
	err = dc.FromPayload(&commonpb.Payload{Data: []byte(`{"ticket_id":1}`)}, &in)
	requireUnsealed(t, err, "data without metadata")

	sealedOne, err := dc.ToPayloads(draftInput{TicketID: 7})
	require.NoError(t, err)
	mixed := &commonpb.Payloads{Payloads: []*commonpb.Payload{sealedOne.Payloads[0], forged(t).Payloads[0]}}
	var a, b draftInput
	requireUnsealed(t, dc.FromPayloads(mixed, &a, &b), "one sealed and one plain: the plain one is refused")

	_, err = (&codec.Codec{Keys: keys}).Decode([]*commonpb.Payload{nil})
	requireUnsealed(t, err, "a nil element in a list")

	// What passes: supportflow's own payloads, nil values included, and
	// the nothing the SDK does not hand a codec at all.
	sealed, err := dc.ToPayloads(draftInput{TicketID: 42, Note: "sealed"}, nil)
	require.NoError(t, err)
	for _, p := range sealed.Payloads {
		assert.Equal(t, codec.EncodingSealed, string(p.Metadata["encoding"]), "a nil value is sealed too")
	}
	var note *string
	require.NoError(t, dc.FromPayloads(sealed, &in, &note))
	assert.Equal(t, draftInput{TicketID: 42, Note: "sealed"}, in)
	assert.Nil(t, note)
	require.NoError(t, dc.FromPayloads(nil), "no input at all: the SDK hands the codec nothing")
	require.NoError(t, dc.FromPayloads(&commonpb.Payloads{}), "an empty list")
	require.NoError(t, dc.FromPayload(nil, &in), "no payload at all")
	out, err := (&codec.Codec{Keys: keys}).Decode(nil)
	require.NoError(t, err)
	assert.Empty(t, out)

	fc := codec.FailureConverter(dc)
	back := fc.FailureToError(fc.ErrorToFailure(temporal.NewApplicationError("Ottoline's order failed", "ZendeskDown")))
	var app *temporal.ApplicationError
	require.ErrorAs(t, back, &app)
	assert.Equal(t, "Ottoline's order failed", app.Message(), "a failure's message is sealed, so the strict converter reads it")
	assert.Equal(t, "ZendeskDown", app.Type())
}

// With the switch on (SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS, while the
// histories from before payload encryption drain), unsealed payloads read
// as they are; what the converter writes is sealed all the same.
func TestDataConverter_AdmitsUnsealedWithTheSwitch(t *testing.T) {
	t.Parallel()
	keys := ring(t, "k1:"+newKey())
	dc := codec.DataConverter(keys, codec.WithAdmitUnsealed(true))

	var in draftInput
	require.NoError(t, dc.FromPayloads(forged(t), &in))
	assert.Equal(t, draftInput{TicketID: 42, Note: "Ottoline's secret plan"}, in)
	null, err := converter.GetDefaultDataConverter().ToPayload(nil)
	require.NoError(t, err)
	var p *draftInput
	require.NoError(t, dc.FromPayload(null, &p))
	assert.Nil(t, p)

	sealed, err := dc.ToPayloads(draftInput{TicketID: 9})
	require.NoError(t, err)
	assert.Equal(t, codec.EncodingSealed, string(sealed.Payloads[0].Metadata["encoding"]), "admitting is for reading: writing still seals")
	require.NoError(t, dc.FromPayloads(sealed, &in))
	assert.Equal(t, int64(9), in.TicketID)
	require.NoError(t, codec.DataConverter(keys).FromPayloads(sealed, &in), "and the strict converter reads it")

	// Apply builds the clients' and workers' options the same way.
	var strict, admitting client.Options
	codec.Apply(&strict, keys)
	codec.Apply(&admitting, keys, codec.WithAdmitUnsealed(true))
	requireUnsealed(t, strict.DataConverter.FromPayloads(forged(t), &in), "Apply is strict by default")
	require.NoError(t, admitting.DataConverter.FromPayloads(forged(t), &in))
	assert.NotNil(t, strict.FailureConverter)
	requireUnsealed(t, codec.DataConverter(keys, codec.WithAdmitUnsealed(false)).FromPayloads(forged(t), &in), "false is the default")
}

// postCodec sends payloads to the codec server handler at path.
func postCodec(t *testing.T, h http.Handler, path string, payloads ...*commonpb.Payload) (int, string, *commonpb.Payloads) {
	t.Helper()
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: payloads})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body))))
	b, _ := io.ReadAll(rec.Body)
	var out commonpb.Payloads
	if rec.Code == http.StatusOK {
		require.NoError(t, protojson.Unmarshal(b, &out))
	}
	return rec.Code, string(b), &out
}

// The codec server decodes for display, old histories included: an
// unsealed payload comes back as it is, even from a codec whose converter
// would refuse it, next to a sealed one opened.
func TestHandler_DecodesUnsealedPayloads(t *testing.T) {
	t.Parallel()
	c := &codec.Codec{Keys: ring(t, "k1:"+newKey())}
	require.False(t, c.AdmitUnsealed)
	plain := forged(t).Payloads[0]
	null, err := converter.GetDefaultDataConverter().ToPayload(nil)
	require.NoError(t, err)
	sealed, err := c.Encode([]*commonpb.Payload{jsonPayload(t, "sealed for k1")})
	require.NoError(t, err)

	code, body, out := postCodec(t, c.Handler(), "/codec/decode", plain, sealed[0], null, &commonpb.Payload{})
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, out.Payloads, 4)
	assert.True(t, proto.Equal(plain, out.Payloads[0]), "unsealed: unchanged")
	assert.Equal(t, `"sealed for k1"`, string(out.Payloads[1].Data), "sealed: opened")
	assert.True(t, proto.Equal(null, out.Payloads[2]))
	assert.True(t, proto.Equal(&commonpb.Payload{}, out.Payloads[3]))
}

// POST .../encode is refused (403, a problem naming the setting) unless
// AllowEncode, and /decode works either way; enabled, encode seals.
func TestHandler_EncodeOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	keys := ring(t, "k1:"+newKey())
	plain := jsonPayload(t, "a forged input")

	c := &codec.Codec{Keys: keys}
	code, body, _ := postCodec(t, c.Handler(), "/codec/encode", plain)
	require.Equal(t, http.StatusForbidden, code, body)
	var problem map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &problem))
	assert.Equal(t, "/problems/encode-disabled", problem["type"])
	assert.EqualValues(t, http.StatusForbidden, problem["status"])
	assert.Contains(t, problem["detail"], codec.EnvAllowEncode+"=true")
	assert.Contains(t, problem["detail"], "starter command or HTTP API")
	assert.NotContains(t, body, "a forged input")
	code, body, _ = postCodec(t, c.Handler(), "/default/encode", plain)
	assert.Equal(t, http.StatusForbidden, code, "under a namespace path too: %s", body)
	code, body, _ = postCodec(t, c.Handler(), "/codec/decode", plain)
	assert.Equal(t, http.StatusOK, code, "decoding needs no setting: %s", body)

	allowed := &codec.Codec{Keys: keys, AllowEncode: true}
	code, body, out := postCodec(t, allowed.Handler(), "/codec/encode", plain)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, out.Payloads, 1)
	assert.Equal(t, codec.EncodingSealed, string(out.Payloads[0].Metadata["encoding"]))
	var s string
	require.NoError(t, codec.DataConverter(keys).FromPayload(out.Payloads[0], &s), "what it sealed, a strict worker reads")
	assert.Equal(t, "a forged input", s)
}
