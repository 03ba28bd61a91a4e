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

// Codec is the converter.PayloadCodec that seals payloads with the
// keyring's active key and opens them with whichever key sealed them.
type Codec struct {
	Keys *Keyring
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

// Decode opens every sealed payload and passes any other through as it
// is: histories written before the codec, and payloads of other encodings,
// still read.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[MetadataEncoding]) != EncodingSealed {
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

// DataConverter is Temporal's default JSON/proto converter with every
// payload sealed by the keyring.
func DataConverter(keys *Keyring) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), &Codec{Keys: keys})
}

// FailureConverter moves a failure's message and stack trace into an
// encoded (so sealed) payload: an error's text may quote a ticket or a
// service's answer. Error types, which workflows and retry policies match
// on, stay readable.
func FailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc, EncodeCommonAttributes: true})
}

// Apply sets o's data and failure converters to seal with keys.
func Apply(o *client.Options, keys *Keyring) {
	o.DataConverter = DataConverter(keys)
	o.FailureConverter = FailureConverter(o.DataConverter)
}
