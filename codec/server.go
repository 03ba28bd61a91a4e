package codec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// EnvAllowEncode is the setting (internal/config reads it for supportflow-api)
// that makes the codec server serve POST .../encode (Codec.AllowEncode).
// Off by default.
const EnvAllowEncode = "SUPPORTFLOW_CODEC_ALLOW_ENCODE"

// Handler serves Temporal's codec server protocol for the Web UI and the
// temporal CLI (--codec-endpoint): POST .../decode, and POST .../encode
// when c.AllowEncode, take a Payloads message as protobuf JSON and answer
// the same number of payloads, opened or sealed. Authentication, CORS and
// the body cap are the caller's (internal/api mounts it behind all three).
//
// What calls which (https://docs.temporal.io/codec-server,
// https://docs.temporal.io/remote-data-encoding,
// https://docs.temporal.io/production-deployment/data-encryption): the
// Web UI and the CLI send a history's payloads to {endpoint}/decode to
// show them; they call {endpoint}/encode only to send payloads of their
// own, the CLI's input to `temporal workflow start`, `execute` or `signal`
// with --codec-endpoint, and the Web UI's when a user starts or signals a
// workflow from it. Reading histories needs decode alone, and encode would
// let any codec token holder seal an input of their choosing that
// supportflow's workers then take for their own; so it is off unless
// enabled (SUPPORTFLOW_CODEC_ALLOW_ENCODE), and POST .../encode is then
// 403, with a problem saying so.
//
// Decode here passes payloads that are not sealed through as they are,
// whatever c.AdmitUnsealed says: the Web UI and the CLI display histories
// written before payload encryption too. Refusing them is the workers'
// and clients' data converter's job (Decode).
//
// Bad input gets a problem+json answer and changes nothing: a body that is
// not a Payloads message is 400; a payload sealed with a key the keyring
// lacks is 422 naming the key; a sealed payload that does not open is 422;
// payloads that open to more than MaxAnswer bytes in all are 413.
func (c *Codec) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var op func([]*commonpb.Payload) ([]*commonpb.Payload, error)
		encode := false
		switch {
		case strings.HasSuffix(r.URL.Path, "/encode"):
			op, encode = c.Encode, true
		case strings.HasSuffix(r.URL.Path, "/decode"):
			op = func(p []*commonpb.Payload) ([]*commonpb.Payload, error) { return c.decode(p, true) }
		default:
			writeProblem(w, http.StatusNotFound, "not-found", "Not found", "the codec server serves POST .../decode (and POST .../encode when enabled)")
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST, OPTIONS")
			writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", "use POST")
			return
		}
		if encode && !c.AllowEncode {
			writeProblem(w, http.StatusForbidden, "encode-disabled", "Encoding is disabled",
				"this codec server only decodes (POST .../decode, all the Web UI and `temporal workflow show` need to display histories): "+
					"encoding would seal any input a codec token holder sends for supportflow's workers to run. "+
					"Start and signal supportflow's workflows through its starter command or HTTP API, which seal their input; "+
					"set "+EnvAllowEncode+"=true on supportflow-api to serve POST .../encode (for the temporal CLI's start and signal with --codec-endpoint, "+
					"or the Web UI's start and signal forms)")
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeProblem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large", fmt.Sprintf("the body must be at most %d bytes", tooBig.Limit))
				return
			}
			writeProblem(w, http.StatusBadRequest, "unreadable-body", "Unreadable request body", err.Error())
			return
		}
		var in commonpb.Payloads
		if err := protojson.Unmarshal(body, &in); err != nil {
			writeProblem(w, http.StatusBadRequest, "invalid-payloads", "Invalid payloads",
				`the body must be a Payloads message as protobuf JSON: {"payloads":[{"metadata":{...},"data":"BASE64"}]}`)
			return
		}
		// One payload at a time, so that an answer is bounded however far
		// its payloads inflate.
		out := make([]*commonpb.Payload, 0, len(in.GetPayloads()))
		total := 0
		for _, p := range in.GetPayloads() {
			conv, err := op([]*commonpb.Payload{p})
			if err != nil {
				writeProblem(w, http.StatusUnprocessableEntity, "codec-failed", "Payloads could not be converted", err.Error())
				return
			}
			if total += proto.Size(conv[0]); total > MaxAnswer {
				writeProblem(w, http.StatusRequestEntityTooLarge, "answer-too-large", "Answer too large",
					fmt.Sprintf("the payloads open to more than %d bytes; send fewer at a time", MaxAnswer))
				return
			}
			out = append(out, conv[0])
		}
		b, err := protojson.Marshal(&commonpb.Payloads{Payloads: out})
		if err != nil {
			writeProblem(w, http.StatusInternalServerError, "codec-failed", "Payloads could not be converted", err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	})
}

// MaxAnswer bounds the payloads one codec request may open to, whatever
// they inflate to (the Web UI sends one event's payloads at a time).
const MaxAnswer = 32 << 20

// writeProblem writes an RFC 9457 problem document.
func writeProblem(w http.ResponseWriter, status int, slug, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "/problems/" + slug, "title": title, "status": status, "detail": detail})
}
