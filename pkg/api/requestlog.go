package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type requestLog struct {
	key, answer string
	err         error
}

type logKey struct{}

func withRequestLog(ctx context.Context, rl *requestLog) context.Context {
	return context.WithValue(ctx, logKey{}, rl)
}

func requestLogFrom(ctx context.Context) *requestLog {
	if rl, ok := ctx.Value(logKey{}).(*requestLog); ok {
		return rl
	}
	return &requestLog{}
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
