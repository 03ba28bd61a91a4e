// Package codec keeps customer text out of Temporal in the clear: an
// AES-256-GCM PayloadCodec on every supportflow client and worker, the
// keyring it reads from the environment, and the codec server the Web UI
// and the temporal CLI decode through.
//
// Every payload (workflow and activity inputs and results, signals,
// updates, queries, heartbeat details, memos, and failure messages and
// stack traces through FailureConverter) is compressed, then sealed under
// the keyring's active key; the key's ID rides in the payload's metadata,
// so a key that is no longer active still opens the payloads it sealed as
// long as it stays in the keyring. A payload that was never encrypted (the
// histories written before the codec) decodes as it is.
//
// What Temporal still sees in the clear: workflow and activity IDs, types,
// task queues, search attributes, timestamps and payload sizes.
// supportflow builds none of them from customer text (see the README's
// threat model); the end-to-end TestPII_HistoryHoldsNoPlaintext searches
// whole raw histories, those included, for a customer's text.
package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// The environment variables a keyring comes from; exactly one is set.
const (
	// EnvKeys holds the keys inline: comma-separated ID:BASE64KEY
	// entries, the first one active.
	EnvKeys = "SUPPORTFLOW_PAYLOAD_KEYS"
	// EnvKeysFile names a file with one ID:BASE64KEY entry a line, the
	// first active; blank lines and lines starting with # are skipped (a
	// Docker or Kubernetes secret mounted as a file).
	EnvKeysFile = "SUPPORTFLOW_PAYLOAD_KEYS_FILE"
)

// KeySize is an AES-256 key's length in bytes.
const KeySize = 32

// ErrKeys is wrapped by every keyring error. No error ever holds key
// material: an entry is named by its position and ID only.
var ErrKeys = errors.New("payload keys")

// keyIDPattern: at most 32 characters, so that a key written where its ID
// belongs (base64 of 32 bytes is 43 or 44 characters) is never taken for
// an ID and quoted in an error.
var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// Keyring holds the keys payloads are sealed and opened with. The zero
// value is not usable; build one with ParseKeyring or FromEnv.
type Keyring struct {
	ids   []string // in the order given; ids[0] seals
	aeads map[string]cipher.AEAD
}

// ActiveID is the ID of the key new payloads are sealed with.
func (k *Keyring) ActiveID() string { return k.ids[0] }

// IDs are every key's ID, the active one first.
func (k *Keyring) IDs() []string { return append([]string(nil), k.ids...) }

// ParseKeyring reads keys from text: entries of the form ID:BASE64KEY,
// separated by commas or newlines, the first one active; blank entries and
// lines starting with # are skipped. Each key must decode (standard or
// URL-safe base64, padded or not) to exactly 32 bytes, and IDs must be
// unique, 1-32 characters of letters, digits, '.', '_' or '-'. source
// names where the text came from, for errors.
func ParseKeyring(text, source string) (*Keyring, error) {
	k := &Keyring{aeads: map[string]cipher.AEAD{}}
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, entry := range strings.Split(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			id, b64, ok := strings.Cut(entry, ":")
			id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
			if !ok || b64 == "" {
				return nil, fmt.Errorf("%w: %s: entry %d is not ID:BASE64KEY", ErrKeys, source, n)
			}
			if !keyIDPattern.MatchString(id) {
				return nil, fmt.Errorf("%w: %s: entry %d: a key ID is 1-32 letters, digits, '.', '_' or '-'", ErrKeys, source, n)
			}
			if _, dup := k.aeads[id]; dup {
				return nil, fmt.Errorf("%w: %s: key ID %q is given twice", ErrKeys, source, id)
			}
			key, err := decodeKey(b64)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: key %q is not base64", ErrKeys, source, id)
			}
			if len(key) != KeySize {
				return nil, fmt.Errorf("%w: %s: key %q is %d bytes; AES-256 needs %d (generate one with: openssl rand -base64 32)",
					ErrKeys, source, id, len(key), KeySize)
			}
			block, err := aes.NewCipher(key)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: key %q: %v", ErrKeys, source, id, err)
			}
			aead, err := cipher.NewGCM(block)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: key %q: %v", ErrKeys, source, id, err)
			}
			k.ids = append(k.ids, id)
			k.aeads[id] = aead
		}
	}
	if len(k.ids) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key", ErrKeys, source)
	}
	return k, nil
}

func decodeKey(s string) ([]byte, error) {
	var firstErr error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := enc.DecodeString(s)
		if err == nil {
			return b, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// FromEnv reads the keyring from SUPPORTFLOW_PAYLOAD_KEYS or the file
// SUPPORTFLOW_PAYLOAD_KEYS_FILE names (getenv is os.Getenv in production).
// Neither set, both set, an unreadable file or a malformed key is an
// error naming the variable: a process without its keys must not start,
// because it could neither read the histories nor keep its payloads
// sealed.
func FromEnv(getenv func(string) string) (*Keyring, error) {
	inline, file := strings.TrimSpace(getenv(EnvKeys)), strings.TrimSpace(getenv(EnvKeysFile))
	switch {
	case inline != "" && file != "":
		return nil, fmt.Errorf("%w: set %s or %s, not both", ErrKeys, EnvKeys, EnvKeysFile)
	case inline != "":
		return ParseKeyring(inline, EnvKeys)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrKeys, EnvKeysFile, err)
		}
		return ParseKeyring(string(b), EnvKeysFile+" ("+file+")")
	default:
		return nil, fmt.Errorf("%w: %s (or %s) is required: payloads are encrypted with it; generate a key with `openssl rand -base64 32` and set %s=k1:THEKEY",
			ErrKeys, EnvKeys, EnvKeysFile, EnvKeys)
	}
}
