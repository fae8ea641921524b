package dynamostore

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// Attribute names. Short, because DynamoDB bills names with values.
const (
	attrPK       = "pk"      // partition key (S)
	attrSK       = "sk"      // sort key (S)
	attrType     = "t"       // item type, for operators reading the table (S)
	attrVersion  = "v"       // record version (N)
	attrWriter   = "w"       // random id of the write that made this version (S)
	attrDoc      = "d"       // the record as JSON (S) ...
	attrDocZ     = "z"       // ... or gzipped JSON (B) when large
	attrReceipt  = "rc"      // an effect's receipt, byte for byte (B)
	attrPlan     = "pl"      // an effect's plan, byte for byte (B)
	attrOrdinal  = "o"       // a resource's creation ordinal (N)
	attrCounter  = "n"       // a sequence counter's last value (N)
	attrSeq      = "s"       // the sequence a message id took (N)
	attrExpires  = "expires" // TTL: epoch seconds after which the item is gone (N)
	counterSK    = "#seq"
	headSK       = "H"
	effectSK     = "E"
	resourcesPK  = "R"
	seqDigits    = 20 // zero-padded sequences sort as numbers
	gzipAbove    = 4 << 10
	maxItemBytes = 350 << 10 // DynamoDB's limit is 400 KB; keep a margin
)

// Item types (attribute t).
const (
	typeEffect   = "effect"
	typeResource = "resource"
	typeHead     = "mailbox"
	typeMessage  = "message"
	typeInbox    = "inbox"
	typeCounter  = "counter"
	typeMsgID    = "message-id"
)

func effectKey(key string) map[string]types.AttributeValue {
	return keyOf("E#"+key, effectSK)
}

func resourceSK(kind, handle string) string { return "R#" + kind + "#" + handle }

func resourceKey(kind, handle string) map[string]types.AttributeValue {
	return keyOf(resourcesPK, resourceSK(kind, handle))
}

func runPK(run string) string      { return "M#" + run }
func inboxPK(worker string) string { return "I#" + worker }
func messageSK(seq int64) string   { return fmt.Sprintf("m#%0*d", seqDigits, seq) }
func inboxItemSK(seq int64) string { return fmt.Sprintf("i#%0*d", seqDigits, seq) }

// messageIDSK is the sort key of the item that records which sequence a
// message id took in its run. An id too long for a sort key (1 KB) is
// hashed, under its own prefix so that no plain id can collide with it.
func messageIDSK(id string) string {
	if len(id) > maxPlainID {
		h := sha256.Sum256([]byte(id))
		return "y#" + hex.EncodeToString(h[:])
	}
	return "x#" + id
}

const maxPlainID = 512

func headKey(run string) map[string]types.AttributeValue {
	return keyOf(runPK(run), headSK)
}

func keyOf(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(pk), attrSK: str(sk)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func bin(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }

func getS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(item map[string]types.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

func getB(item map[string]types.AttributeValue, name string) []byte {
	if v, ok := item[name].(*types.AttributeValueMemberB); ok {
		return v.Value
	}
	return nil
}

// newWriteID returns a random id that marks the item version one write
// made, so that a write whose answer was lost can recognise itself.
func newWriteID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// encodeDoc sets the document attribute of v: JSON as a string, or gzipped
// JSON when large (a 64 KiB brief would otherwise cost 64 write units on
// every worker update and be read again by every inventory listing).
func encodeDoc(v any) (types.AttributeValue, string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, "", err
	}
	if len(b) <= gzipAbove {
		return str(string(b)), attrDoc, nil
	}
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	if err != nil {
		return nil, "", err
	}
	zw.Write(b)
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return bin(z.Bytes()), attrDocZ, nil
}

func decodeDoc(item map[string]types.AttributeValue, v any) error {
	var b []byte
	switch {
	case item[attrDoc] != nil:
		b = []byte(getS(item, attrDoc))
	case item[attrDocZ] != nil:
		zr, err := gzip.NewReader(bytes.NewReader(getB(item, attrDocZ)))
		if err != nil {
			return err
		}
		if b, err = io.ReadAll(zr); err != nil {
			return err
		}
	default:
		return fmt.Errorf("item %s/%s has no document", getS(item, attrPK), getS(item, attrSK))
	}
	return json.Unmarshal(b, v)
}

// fields is what one record write sets and removes.
type fields struct {
	set    map[string]types.AttributeValue
	remove []string
}

// docFields encodes v as the item's document (d or z, removing the other).
func docFields(typ string, v any) (fields, error) {
	av, name, err := encodeDoc(v)
	if err != nil {
		return fields{}, err
	}
	f := fields{set: map[string]types.AttributeValue{attrType: str(typ), name: av}}
	if name == attrDoc {
		f.remove = append(f.remove, attrDocZ)
	} else {
		f.remove = append(f.remove, attrDoc)
	}
	return f, nil
}

// rawField keeps raw bytes as they are (JSON re-encoding would compact and
// escape them, and a receipt replays byte for byte). DynamoDB refuses an
// empty binary, so empty is removed.
func (f *fields) raw(name string, b []byte) {
	if len(b) == 0 {
		f.remove = append(f.remove, name)
		return
	}
	f.set[name] = bin(b)
}

func effectFields(e store.Effect) (fields, error) {
	doc := e
	doc.Receipt, doc.Plan = nil, nil
	f, err := docFields(typeEffect, doc)
	if err != nil {
		return f, err
	}
	f.raw(attrReceipt, e.Receipt)
	f.raw(attrPlan, e.Plan)
	return f, nil
}

func decodeEffect(item map[string]types.AttributeValue) (store.Effect, error) {
	var e store.Effect
	if err := decodeDoc(item, &e); err != nil {
		return e, err
	}
	if b := getB(item, attrReceipt); len(b) > 0 {
		e.Receipt = append([]byte(nil), b...)
	}
	if b := getB(item, attrPlan); len(b) > 0 {
		e.Plan = append([]byte(nil), b...)
	}
	return e, nil
}

// itemSize estimates an item's size the way DynamoDB bills it (names plus
// values), closely enough to refuse one that would break the 400 KB limit.
func itemSize(f fields, key map[string]types.AttributeValue) int {
	n := 0
	for _, m := range []map[string]types.AttributeValue{f.set, key} {
		for name, v := range m {
			n += len(name)
			switch v := v.(type) {
			case *types.AttributeValueMemberS:
				n += len(v.Value)
			case *types.AttributeValueMemberB:
				n += len(v.Value)
			case *types.AttributeValueMemberN:
				n += len(v.Value)
			}
		}
	}
	return n + 64
}

func checkSize(op galleyerr.Op, f fields, key map[string]types.AttributeValue) error {
	if n := itemSize(f, key); n > maxItemBytes {
		return galleyerr.E(op, galleyerr.TooLarge, fmt.Sprintf("record of %d bytes exceeds the store's item limit of %d", n, maxItemBytes))
	}
	return nil
}

// expired reports whether item carries a TTL that has passed. DynamoDB
// deletes expired items lazily (up to days later), so reads filter.
func expired(item map[string]types.AttributeValue, now time.Time) bool {
	exp, ok := getN(item, attrExpires)
	return ok && exp <= now.Unix()
}

func checkKind(op galleyerr.Op, kind string) error {
	if kind == "" || strings.Contains(kind, "#") {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("resource kind %q is empty or contains '#'", kind))
	}
	return nil
}
