package boltstore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/store"
)

// BenchmarkDecodedHit is the cache alone, on hits: the lookup under the
// read lock, the bytes.Equal and the clone. Run with -cpu 1,2: if the lock
// were contended, ns/op at -cpu 2 would not fall below -cpu 1's.
func BenchmarkDecodedHit(b *testing.B) {
	c := newDecodedResources(decodedCap)
	const n = 500
	keys, vals := make([][]byte, n), make([][]byte, n)
	for i := range n {
		q := map[string]string{"m-1": "yes", "m-2": "use the fixture", "m-3": ""}
		body, err := json.Marshal(store.Resource{Kind: "worker", Handle: fmt.Sprint("w-", i), Worker: &store.Worker{Brief: strings.Repeat("brief ", 70), Questions: q}})
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = []byte(fmt.Sprint("worker\x00w-", i))
		vals[i] = append(binary.BigEndian.AppendUint64(nil, 1), body...)
		if _, _, err := c.get("bench", keys[i], vals[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, _, err := c.get("bench", keys[i%n], vals[i%n]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
