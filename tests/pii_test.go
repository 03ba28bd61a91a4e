package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/workflows"
)

// payloadsOf walks every payload in a message (inputs, results, failure
// details, heartbeat details, memos), in order, but for search attributes:
// the server indexes those, so they are plain by design and hold no
// customer text (the raw-bytes search below covers them).
func payloadsOf(m proto.Message, visit func(*commonpb.Payload)) {
	var walk func(proto.Message)
	walk = func(m proto.Message) {
		if p, ok := m.(*commonpb.Payload); ok {
			visit(p)
			return
		}
		if _, ok := m.(*commonpb.SearchAttributes); ok {
			return
		}
		r := m.ProtoReflect()
		r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message().Interface())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message().Interface())
					return true
				})
			case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
				walk(v.Message().Interface())
			}
			return true
		})
	}
	walk(m)
}

// A ticket's whole life (the Zendesk webhook, enrichment from BigQuery, a
// draft whose first model answer is refused while quoting the customer, the
// approval, the reply posted) leaves Temporal holding none of the
// customer's name, email, comment text or the reply, in any payload or
// failure message, in the clear: the raw histories (as the server stores
// them and the Web UI reads them) are searched byte for byte. The same
// histories, read through the codec, do hold that text, so the search
// looked where it is.
func TestPII_HistoryHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=200ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=200ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	const (
		name    = "Ottoline Quennell-Vasquez"
		email   = "ottoline.qv@pii-example.test"
		comment = "My tabby Bartholomew chewed the delivery box; please cancel my plan"
		refusal = "I refuse to answer in JSON for Ottoline"
		reply   = "Dear Ottoline Quennell-Vasquez, your plan is cancelled and Bartholomew is forgiven"
	)
	requester := 70000 + ticketIDs.Add(1)
	sub := fmt.Sprintf("sub-pii-%d", requester)
	ticket := standin.Ticket{ID: 70000 + ticketIDs.Add(1), Subject: "Cancel for Bartholomew", Description: comment,
		RequesterID: requester, RequesterName: name, Status: "new"}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "cust-pii", Email: email, Orders: 2, ActiveSubscriptions: []string{sub}})
	s.subs.AddSubscription(sub, "cust-pii")
	// The first answer is not JSON: the attempt fails (with an error that
	// does not quote it) and the retry drafts.
	var answers atomic.Int32
	s.model.SetResponder(func(standin.ChatRequest) string {
		if answers.Add(1) == 1 {
			return refusal
		}
		b, _ := json.Marshal(map[string]any{"reply": reply, "cancel_subscriptions": []string{sub}})
		return string(b)
	})
	s.zd.AddTicket(ticket) // Zendesk delivers ticket.created to the webhook

	s.waitEnriched(ticket.ID)
	code, resp := c.do("POST", fmt.Sprintf("/tickets/%d/drafts", ticket.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	st := s.waitState(ticket.ID, supportflow.DraftAwaitingApproval)
	require.Equal(t, reply, st.Proposal.Reply, "the API reads the proposal in the clear")
	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/approve", apiToken, []byte(`{"approved_by":"agent@acme.test"}`), nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	s.waitState(ticket.ID, supportflow.DraftDone)
	require.Equal(t, 1, s.zd.CommentCount(ticket.ID))
	require.Equal(t, reply, s.zd.Comments(ticket.ID)[0].Body)
	require.GreaterOrEqual(t, int(answers.Load()), 2, "the refused answer was retried")

	secrets := []string{name, email, comment, reply, refusal, "Ottoline", "Bartholomew"}
	workflowIDs := []string{supportflow.EnrichWorkflowID(ticket.ID), supportflow.DraftWorkflowID(ticket.ID), supportflow.ExecuteWorkflowID(st.Proposal.ID)}
	var decoded strings.Builder
	sealed := map[string]int{}
	opener := &codec.Codec{Keys: mustKeys(t, keysA)}
	for _, id := range workflowIDs {
		s.waitClosed(id)
		h := s.history(s.temporal, id, "")
		raw, err := proto.Marshal(h)
		require.NoError(t, err)
		asJSON, err := protojson.Marshal(h)
		require.NoError(t, err)
		for _, secret := range secrets {
			assert.NotContains(t, string(raw), secret, "%s's stored history holds %q in the clear", id, secret)
			assert.NotContains(t, string(asJSON), secret, "%s's history as the Web UI fetches it holds %q", id, secret)
		}
		payloadsOf(h, func(p *commonpb.Payload) {
			sealed[string(p.GetMetadata()[codec.MetadataEncoding])+"/"+string(p.GetMetadata()[codec.MetadataKeyID])]++
			opened, err := opener.Decode([]*commonpb.Payload{p})
			require.NoError(t, err)
			decoded.Write(opened[0].GetData())
		})
		for _, e := range h.Events {
			if f := e.GetActivityTaskStartedEventAttributes().GetLastFailure(); f != nil {
				assert.NotNil(t, f.GetEncodedAttributes(), "a failure's message is sealed in the history")
				decoded.WriteString(s.failures.FailureToError(f).Error())
			}
		}
	}
	assert.Equal(t, []string{"binary/encrypted/test-a"}, keysOf(sealed), "every payload is sealed with the active key")
	for _, secret := range []string{name, email, comment, reply} {
		assert.Contains(t, decoded.String(), secret, "the codec opens what the history holds (so the search above looked in the right place)")
	}
	assert.Contains(t, decoded.String(), "not a JSON object", "the refused answer's failure is in the history, sealed")
	assert.NotContains(t, decoded.String(), refusal, "an invalid answer's error does not quote the model, which may repeat the customer")
}

func keysOf(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func mustKeys(t *testing.T, env string) *codec.Keyring {
	t.Helper()
	k, err := codec.ParseKeyring(env, "test keys")
	require.NoError(t, err)
	return k
}

// A draft started while the fleet seals with key test-a awaits approval;
// every process then moves to test-b, keeping test-a to read with. The
// approval is sent under test-b, the waiting run reads its history (sealed
// with test-a) and finishes: one comment. The run's history then holds
// payloads under both keys, and replays with today's code (the committed
// histories replay in workflows' TestReplay_CommittedHistories, this one
// among them when recorded).
func TestPII_KeyRotation(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Please cancel my plan, Rotation here.", "sub-rot")
	s.startWorker()
	_, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)

	// The rotation: the workers restart with test-b active, test-a kept.
	s.stopWorker()
	s.payloadKeys = keysBA
	s.startWorker()
	rotated, dc, fc := dialTemporal(t, keysBA)
	rs := *s.starter
	rs.Client, rs.Converter = rotated, dc
	_, err = rs.Approve(ctxT(t), ticket, supportflow.ApproveRequest{ProposalID: st.Proposal.ID, ApprovedBy: "rotation"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := rs.DraftStatus(context.Background(), ticket)
		return err == nil && d.State == supportflow.DraftDone
	}, waitBudget, 50*time.Millisecond, "the draft started under test-a finishes under test-b")
	assert.Equal(t, 1, s.zd.CommentCount(ticket))
	assert.Equal(t, 1, s.subs.Cancellations("sub-rot"))

	s.waitClosed(supportflow.DraftWorkflowID(ticket))
	h := s.history(rotated, supportflow.DraftWorkflowID(ticket), "")
	seen := map[string]int{}
	payloadsOf(h, func(p *commonpb.Payload) { seen[string(p.GetMetadata()[codec.MetadataKeyID])]++ })
	assert.Positive(t, seen["test-a"], "payloads sealed before the rotation: %v", seen)
	assert.Positive(t, seen["test-b"], "payloads sealed after it: %v", seen)
	assert.Zero(t, seen[""], "no payload in the clear: %v", seen)

	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: dc, FailureConverter: fc})
	require.NoError(t, err)
	(&workflows.Workflows{}).Register(r)
	require.NoError(t, r.ReplayWorkflowHistory(nil, h), "the rotated run replays")

	// A process given only test-b cannot read what test-a sealed: the
	// error names the missing key rather than showing garbage.
	var in supportflow.DraftRequest
	onlyB := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), &codec.Codec{Keys: mustKeys(t, strings.Split(keysBA, ",")[0])})
	err = onlyB.FromPayloads(h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput(), &in)
	require.ErrorIs(t, err, codec.ErrUnknownKey)
	assert.Contains(t, err.Error(), `"test-a"`)
	s.recordHistory(supportflow.DraftWorkflowID(ticket), "", "draft_reply_key_rotated")
}

// The codec server the Web UI decodes through: the right codec token gets
// the payload in the clear; no token, a wrong one, or the API's own token
// gets 401; a preflight from the Web UI's origin is allowed and one from
// another origin refused; another namespace, a malformed body and a
// payload sealed with an unknown key each get their own error.
func TestPII_CodecServerForWebUI(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	c := s.api()
	dc := codec.DataConverter(mustKeys(t, keysA))
	sealed, err := dc.ToPayloads(supportflow.ApproveRequest{ProposalID: "p-1", ApprovedBy: "Ottoline Quennell"})
	require.NoError(t, err)
	body, err := protojson.Marshal(sealed)
	require.NoError(t, err)
	require.NotContains(t, string(body), "Ottoline")
	require.NotContains(t, string(body), "T3R0b2xpbmU", "not even base64 of the name")

	post := func(path, token string, body []byte, h http.Header) (int, []byte) {
		if h == nil {
			h = http.Header{}
		}
		h.Set("Content-Type", "application/json")
		return c.do("POST", path, token, body, h)
	}
	code, resp := post("/codec/decode", codecToken, body, http.Header{"X-Namespace": {"default"}, "Origin": {webUIOrigin}})
	require.Equal(t, http.StatusOK, code, "%s", resp)
	var out commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(resp, &out))
	require.Len(t, out.Payloads, 1)
	assert.Equal(t, "json/plain", string(out.Payloads[0].GetMetadata()["encoding"]))
	assert.JSONEq(t, `{"proposal_id":"p-1","approved_by":"Ottoline Quennell"}`, string(out.Payloads[0].GetData()))

	for _, tc := range []struct{ name, token string }{{"no token", ""}, {"wrong token", "not-the-codec-token-at-all"}, {"the API's token", apiToken}} {
		code, resp := post("/codec/decode", tc.token, body, nil)
		assert.Equal(t, http.StatusUnauthorized, code, "%s: %s", tc.name, resp)
		assert.NotContains(t, string(resp), "Ottoline", tc.name)
	}

	// Encode is off unless SUPPORTFLOW_CODEC_ALLOW_ENCODE: a codec token
	// cannot seal a forged workflow input.
	plainPayload := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"hello Ottoline"`)}
	plain, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{plainPayload}})
	require.NoError(t, err)
	code, resp = post("/codec/encode", codecToken, plain, nil)
	require.Equal(t, http.StatusForbidden, code, "%s", resp)
	assert.Contains(t, string(resp), codec.EnvAllowEncode, "the refusal names the setting")
	assert.NotContains(t, string(resp), "Ottoline")
	// A payload sealed by a worker (here, the same keys) decodes.
	sealedByWorker, err := (&codec.Codec{Keys: mustKeys(t, keysA)}).Encode([]*commonpb.Payload{plainPayload})
	require.NoError(t, err)
	assert.Equal(t, "test-a", string(sealedByWorker[0].GetMetadata()[codec.MetadataKeyID]), "the sealed payload names its key")
	resp, err = protojson.Marshal(&commonpb.Payloads{Payloads: sealedByWorker})
	require.NoError(t, err)
	code, resp = post("/codec/decode", codecToken, resp, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	var dec commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(resp, &dec))
	assert.Equal(t, `"hello Ottoline"`, string(dec.Payloads[0].GetData()))

	// CORS: the Web UI's preflight carries no token.
	pre := func(origin string) *http.Response {
		req, err := http.NewRequest("OPTIONS", c.url+"/codec/decode", nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type,x-namespace,authorization")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	ok := pre(webUIOrigin)
	assert.Equal(t, http.StatusNoContent, ok.StatusCode)
	assert.Equal(t, webUIOrigin, ok.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, ok.Header.Get("Access-Control-Allow-Headers"), "X-Namespace")
	assert.Equal(t, "true", ok.Header.Get("Access-Control-Allow-Credentials"))
	refused := pre("https://evil.example")
	assert.Equal(t, http.StatusForbidden, refused.StatusCode)
	assert.Empty(t, refused.Header.Get("Access-Control-Allow-Origin"))
	code, _ = post("/codec/decode", codecToken, body, http.Header{"Origin": {"https://evil.example"}})
	assert.Equal(t, http.StatusForbidden, code, "a page on another origin cannot use a token the browser holds")

	code, resp = post("/codec/decode", codecToken, body, http.Header{"X-Namespace": {"someone-else"}})
	assert.Equal(t, http.StatusForbidden, code, "%s", resp)
	code, resp = post("/codec/decode", codecToken, []byte(`{"payloads": "nope"`), nil)
	assert.Equal(t, http.StatusBadRequest, code, "%s", resp)
	otherKey, err := dc.ToPayloads("x")
	require.NoError(t, err)
	otherKey.Payloads[0].Metadata[codec.MetadataKeyID] = []byte("retired-2024")
	b, _ := protojson.Marshal(otherKey)
	code, resp = post("/codec/decode", codecToken, b, nil)
	assert.Equal(t, http.StatusUnprocessableEntity, code, "%s", resp)
	assert.Contains(t, string(resp), "retired-2024")
	code, _ = c.do("GET", "/codec/decode", codecToken, nil, nil)
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	code, _ = post("/codec/decode", codecToken, bytes.Repeat([]byte("x"), 17<<20), nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
}
