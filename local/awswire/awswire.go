// Package awswire is what the stand-ins of AWS services share of AWS's
// wire: request ids, and the server side of the awsJson protocols (1.0 and
// 1.1), in which every call is a POST to "/" naming its operation in
// X-Amz-Target and answered in JSON.
//
// A Service serves one such API for a stand-in (the ECS and Secrets Manager
// stand-ins): it bounds and reads the body, lets the stand-in refuse what
// it would not serve (Admit: method, path, headers, authentication, in the
// service's own order), routes the operation by X-Amz-Target to its
// Handler, answers an error as AWS does (the HTTP status, the code in
// X-Amzn-Errortype and the body {"__type", "message"}: Error), answers an
// injected Fault instead of serving the call (Faults), and tells the
// stand-in of every exchange once answered, for its request record
// (Recorder). The STS stand-in (awsQuery) and the IAM gates use UUID for
// their request ids.
package awswire

import (
	"crypto/rand"
	"encoding/hex"
)

// The content types of the awsJson protocols.
const (
	ContentTypeJSON10 = "application/x-amz-json-1.0"
	ContentTypeJSON11 = "application/x-amz-json-1.1"
)

// UUID is a random (version 4) UUID, the shape of AWS's request ids and of
// many of its resource ids.
func UUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
