package dynamostore_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/galley-run/galley/pkg/store"
)

// Per-call figures against DynamoDB Local (make bench), beside the embedded
// store's.
func BenchmarkStore(b *testing.B) {
	if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") == "" {
		b.Skip("AWS_ENDPOINT_URL_DYNAMODB unset")
	}
	s := newTable(b, client(b))
	ctx := b.Context()
	b.Run("PutEffect/create", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := s.PutEffect(ctx, effect(fmt.Sprint("c", i), "fp"), store.NoVersion); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PutEffect/update", func(b *testing.B) {
		v, err := s.PutEffect(ctx, effect("u", "fp"), store.NoVersion)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if v, err = s.PutEffect(ctx, effect("u", "fp"), v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetEffect", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.GetEffect(ctx, "u"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendMessage", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			// A repeated id would append nothing.
			if _, _, err := s.AppendMessage(ctx, "bench", msg(fmt.Sprint("m-", i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListMessages/10", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ListMessages(ctx, "bench", 0, 10); err != nil {
				b.Fatal(err)
			}
		}
	})
}
