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

// Handler serves Temporal's codec server protocol for the Web UI and the
// temporal CLI (--codec-endpoint): POST .../encode and POST .../decode
// take a Payloads message as protobuf JSON and answer the same number of
// payloads, sealed or opened
// (https://docs.temporal.io/production-deployment/data-encryption).
// Authentication, CORS and the body cap are the caller's (internal/api
// mounts it behind all three).
//
// Bad input gets a problem+json answer and changes nothing: a body that is
// not a Payloads message is 400; a payload sealed with a key the keyring
// lacks is 422 naming the key; a sealed payload that does not open is 422;
// payloads that open to more than MaxAnswer bytes in all are 413.
func (c *Codec) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var op func([]*commonpb.Payload) ([]*commonpb.Payload, error)
		switch {
		case strings.HasSuffix(r.URL.Path, "/encode"):
			op = c.Encode
		case strings.HasSuffix(r.URL.Path, "/decode"):
			op = c.Decode
		default:
			writeProblem(w, http.StatusNotFound, "not-found", "Not found", "the codec server serves POST .../encode and POST .../decode")
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST, OPTIONS")
			writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", "use POST")
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
