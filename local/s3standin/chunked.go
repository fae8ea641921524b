package s3standin

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"hash/crc32"
	"strconv"
	"strings"
)

// decodeAWSChunked decodes an aws-chunked body with unsigned chunks and
// trailers, as the SDK writes it:
//
//	<hex size>\r\n<data>\r\n ... 0\r\n<name>:<value>\r\n ... \r\n
//
// answering the data, the trailers by lower-case name, or why it is
// malformed. The data is bounded by max.
func decodeAWSChunked(raw []byte, max int64) (data []byte, trailers map[string]string, why string) {
	var out bytes.Buffer
	for {
		line, rest, ok := bytes.Cut(raw, []byte("\r\n"))
		if !ok {
			return nil, nil, "a chunk's size line has no end"
		}
		sizeText, ext, _ := strings.Cut(string(line), ";")
		if ext != "" {
			return nil, nil, "a chunk carries a signature: this body is signed, not unsigned with a trailer"
		}
		size, err := strconv.ParseInt(sizeText, 16, 64)
		if err != nil || size < 0 || sizeText == "" {
			return nil, nil, "a chunk's size is not a hexadecimal number"
		}
		raw = rest
		if size == 0 {
			break
		}
		if size > max-int64(out.Len()) || int64(len(raw)) < size+2 {
			return nil, nil, "a chunk is longer than the body or the bound"
		}
		out.Write(raw[:size])
		if !bytes.Equal(raw[size:size+2], []byte("\r\n")) {
			return nil, nil, "a chunk's data does not end with CRLF"
		}
		raw = raw[size+2:]
	}
	trailers = map[string]string{}
	for {
		line, rest, ok := bytes.Cut(raw, []byte("\r\n"))
		if !ok {
			return nil, nil, "the trailers have no end"
		}
		raw = rest
		if len(line) == 0 {
			break
		}
		name, value, ok := strings.Cut(string(line), ":")
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok || name == "" {
			return nil, nil, "a trailer is not name:value"
		}
		if _, dup := trailers[name]; dup {
			return nil, nil, "a trailer is named twice"
		}
		trailers[name] = strings.TrimSpace(value)
	}
	if len(raw) != 0 {
		return nil, nil, "bytes follow the body's end"
	}
	return out.Bytes(), trailers, ""
}

// checksum is one of the trailing checksums S3 verifies, encoded as S3
// writes it (base64 of the big-endian sum).
type checksum struct{ hash.Hash }

func newChecksum(trailer string) (checksum, bool) {
	switch trailer {
	case "x-amz-checksum-crc32":
		return checksum{crc32.NewIEEE()}, true
	case "x-amz-checksum-crc32c":
		return checksum{crc32.New(crc32.MakeTable(crc32.Castagnoli))}, true
	case "x-amz-checksum-sha1":
		return checksum{sha1.New()}, true
	case "x-amz-checksum-sha256":
		return checksum{sha256.New()}, true
	}
	return checksum{}, false
}

func (c checksum) encoded() string {
	if h32, ok := c.Hash.(interface{ Sum32() uint32 }); ok {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], h32.Sum32())
		return base64.StdEncoding.EncodeToString(b[:])
	}
	return base64.StdEncoding.EncodeToString(c.Sum(nil))
}
