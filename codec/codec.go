package codec

import (
	"bytes"
	"compress/flate"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// Metadata of a sealed payload. The encoding value is the one Temporal's
// samples and tools use for encrypted payloads; the key ID says which key
// opens it.
const (
	MetadataEncoding = "encoding"
	EncodingSealed   = "binary/encrypted"
	MetadataKeyID    = "encryption-key-id"
	MetadataCipher   = "encryption-cipher"
	CipherName       = "AES256-GCM"
)

// The sealed plaintext starts with one byte saying how the original
// payload (its protobuf encoding, metadata and data) follows.
const (
	formatRaw   byte = 0
	formatFlate byte = 1
)

// compressFrom is the smallest payload worth compressing; smaller ones
// rarely shrink.
const compressFrom = 256

// MaxOpened bounds what one payload may inflate to: Temporal refuses
// payloads over 2 MB, so no genuine one comes near it.
const MaxOpened = 4 << 20

// ErrUnknownKey is wrapped when a payload was sealed with a key the
// keyring does not hold (a key removed too early, or a process given the
// wrong keys).
var ErrUnknownKey = errors.New("payload sealed with a key this process does not have")

// ErrCorrupt is wrapped when a sealed payload does not open: altered,
// truncated, or metadata that does not match the key.
var ErrCorrupt = errors.New("sealed payload does not open")

// ErrUnsealed is wrapped when a worker or client, whose converter admits
// only sealed payloads, meets one that is not: plain JSON (a workflow
// started or signalled around supportflow, by the temporal CLI, the Web UI
// or any other SDK client), an empty or nil payload, or a history written
// before payload encryption. The error around it says how to start
// workflows instead and which setting admits such payloads.
var ErrUnsealed = errors.New("payload is not sealed")

// EnvAdmitUnsealed is the setting (internal/config reads it) that makes
// workers and clients admit payloads that are not sealed, while the
// histories written before payload encryption drain. Off by default.
const EnvAdmitUnsealed = "SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS"

// Codec is the converter.PayloadCodec that seals payloads with the
// keyring's active key and opens them with whichever key sealed them.
//
// Its zero options are the strict ones: Decode refuses every payload that
// is not sealed, and Handler serves /decode only.
type Codec struct {
	Keys *Keyring
	// AdmitUnsealed makes Decode pass payloads that are not sealed through
	// as they are, instead of refusing them with ErrUnsealed: for the
	// histories written before payload encryption, while they drain
	// (SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS), and for replaying them. It
	// lets anyone who can reach the Temporal frontend start a workflow
	// with an input of their own, so it is off by default. The codec
	// server's decode admits them whatever it says (Handler).
	AdmitUnsealed bool
	// AllowEncode makes Handler serve POST .../encode, which seals
	// whatever payloads a codec token holder sends
	// (SUPPORTFLOW_CODEC_ALLOW_ENCODE). Off, .../encode answers 403 and
	// the codec server only decodes.
	AllowEncode bool
}

var _ converter.PayloadCodec = (*Codec)(nil)

// additionalData binds a sealed payload to its key ID and this format.
func additionalData(keyID string) []byte { return []byte("supportflow-payload/v1/" + keyID) }

// Encode seals every payload: compressed when that helps, then encrypted
// with a fresh random nonce under the active key.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	id := c.Keys.ActiveID()
	aead := c.Keys.aeads[id]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		raw, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("codec: marshal payload: %w", err)
		}
		plain := append([]byte{formatRaw}, raw...)
		if len(raw) >= compressFrom {
			if z, err := deflate(raw); err == nil && len(z) < len(raw) {
				plain = append([]byte{formatFlate}, z...)
			}
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("codec: nonce: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				MetadataEncoding: []byte(EncodingSealed),
				MetadataCipher:   []byte(CipherName),
				MetadataKeyID:    []byte(id),
			},
			Data: aead.Seal(nonce, nonce, plain, additionalData(id)),
		}
	}
	return out, nil
}

// Decode opens every sealed payload. Any other payload is refused with an
// error wrapping ErrUnsealed, unless c.AdmitUnsealed, when it passes
// through as it is.
//
// What the Temporal Go SDK hands a PayloadCodec, and why strictness holds
// for it: CodecDataConverter skips the codec for a nil payload list and a
// nil single payload (no value, nothing to decode), and an empty list
// decodes to an empty list here; every payload supportflow's converter
// makes is sealed, nil values included (the default converter's
// "binary/null" payload is sealed like any other), and so are failure
// messages (FailureConverter). Search attributes never pass through a
// codec, nor do headers unless a context propagator or tracing
// interceptor opts in with EncodeHeaders (supportflow's OpenTelemetry
// interceptor does not: its header stays plain, read with the default
// converter). What is left unsealed comes from outside supportflow's
// converter: a plain JSON input, a plain "binary/null" (which would start
// a workflow with a zero input just the same), a payload without an
// encoding, a nil element in a list.
//
// The refusal also wraps converter.WorkflowTaskFailureError: a workflow
// task that meets an unsealed payload (a workflow's input, an activity's
// result) fails and is retried rather than failing the workflow, so a run
// opened before payload encryption resumes once its worker admits
// unsealed payloads, and a forged one runs none of its code meanwhile.
// Elsewhere (an activity's input, a client reading a result) it is an
// ordinary error; a signal whose payload does not decode is dropped by
// the SDK.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return c.decode(payloads, c.AdmitUnsealed)
}

// decode opens every sealed payload; admit says what becomes of the
// others: passed through as they are, or refused.
func (c *Codec) decode(payloads []*commonpb.Payload, admit bool) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if enc := string(p.GetMetadata()[MetadataEncoding]); enc != EncodingSealed {
			if !admit {
				return nil, converter.NewWorkflowTaskFailureError(unsealed(p, enc))
			}
			out[i] = p
			continue
		}
		opened, err := c.open(p)
		if err != nil {
			return nil, err
		}
		out[i] = opened
	}
	return out, nil
}

// unsealed is the refusal of p, a payload whose encoding (enc) is not the
// sealed one. It names the encoding (never the data) and says what to do.
func unsealed(p *commonpb.Payload, enc string) error {
	what := fmt.Sprintf("its encoding is %q", enc)
	switch {
	case p == nil:
		what = "a nil payload"
	case enc == "":
		what = "it has no encoding"
	}
	return fmt.Errorf("codec: %w (%s, not %s): supportflow's workers and clients take only payloads sealed with the payload keys, "+
		"so start and signal its workflows through supportflow's starter command or HTTP API, which seal them, "+
		"not with plain input from the temporal CLI, the Web UI or another client; "+
		"while histories written before payload encryption drain, set %s=true on the workers, supportflow-api and starter to admit unsealed payloads",
		ErrUnsealed, what, EncodingSealed, EnvAdmitUnsealed)
}

func (c *Codec) open(p *commonpb.Payload) (*commonpb.Payload, error) {
	id := string(p.GetMetadata()[MetadataKeyID])
	if cph := string(p.GetMetadata()[MetadataCipher]); cph != CipherName {
		return nil, fmt.Errorf("codec: %w: cipher %q, want %s", ErrCorrupt, cph, CipherName)
	}
	aead, ok := c.Keys.aeads[id]
	if !ok {
		return nil, fmt.Errorf("codec: %w: key %q (this process has %v; keep a retired key in %s until every history sealed with it is gone)",
			ErrUnknownKey, id, c.Keys.ids, EnvKeys)
	}
	data := p.GetData()
	if len(data) < aead.NonceSize()+aead.Overhead()+1 {
		return nil, fmt.Errorf("codec: %w: %d bytes is too short", ErrCorrupt, len(data))
	}
	nonce, sealed := data[:aead.NonceSize()], data[aead.NonceSize():]
	plain, err := aead.Open(nil, nonce, sealed, additionalData(id))
	if err != nil {
		return nil, fmt.Errorf("codec: %w under key %q", ErrCorrupt, id)
	}
	body := plain[1:]
	switch plain[0] {
	case formatRaw:
	case formatFlate:
		if body, err = inflate(body); err != nil {
			return nil, fmt.Errorf("codec: %w: %v", ErrCorrupt, err)
		}
	default:
		return nil, fmt.Errorf("codec: %w: unknown format %d", ErrCorrupt, plain[0])
	}
	var orig commonpb.Payload
	if err := proto.Unmarshal(body, &orig); err != nil {
		return nil, fmt.Errorf("codec: %w: %v", ErrCorrupt, err)
	}
	return &orig, nil
}

// A flate writer holds about 800 KB of tables: one per payload would
// dominate the codec's cost, so they are pooled (as are readers). BestSpeed:
// 256 KiB of conversation seals in about 2.5 ms at 28% of its size, where
// the default level takes ten times as long for 21% (BenchmarkCodec).
var (
	writers = sync.Pool{New: func() any { w, _ := flate.NewWriter(nil, flate.BestSpeed); return w }}
	readers = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}
)

func deflate(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := writers.Get().(*flate.Writer)
	defer writers.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func inflate(b []byte) ([]byte, error) {
	r := readers.Get().(io.ReadCloser)
	defer readers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(b), nil); err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(r, MaxOpened+1))
	if err != nil {
		return nil, err
	}
	if len(out) > MaxOpened {
		return nil, fmt.Errorf("inflates past %d bytes", MaxOpened)
	}
	return out, nil
}

// Option adjusts the codec DataConverter and Apply build.
type Option func(*Codec)

// WithAdmitUnsealed sets Codec.AdmitUnsealed: true makes the converter
// pass payloads that are not sealed through instead of refusing them with
// ErrUnsealed (SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS; for histories written
// before payload encryption, while they drain or are replayed).
func WithAdmitUnsealed(admit bool) Option {
	return func(c *Codec) { c.AdmitUnsealed = admit }
}

// DataConverter is Temporal's default JSON/proto converter with every
// payload sealed by the keyring. It refuses payloads that are not sealed
// unless opts admit them (WithAdmitUnsealed).
func DataConverter(keys *Keyring, opts ...Option) converter.DataConverter {
	c := &Codec{Keys: keys}
	for _, o := range opts {
		o(c)
	}
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}

// FailureConverter moves a failure's message and stack trace into an
// encoded (so sealed) payload: an error's text may quote a ticket or a
// service's answer. Error types, which workflows and retry policies match
// on, stay readable.
func FailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc, EncodeCommonAttributes: true})
}

// Apply sets o's data and failure converters to seal with keys and to
// refuse payloads that are not sealed, unless opts admit them
// (WithAdmitUnsealed).
func Apply(o *client.Options, keys *Keyring, opts ...Option) {
	o.DataConverter = DataConverter(keys, opts...)
	o.FailureConverter = FailureConverter(o.DataConverter)
}
