package localserver

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/galley-run/galley/pkg/store/memstore"
)

// TestExclusiveStoreOnlyWhenEmbedded: the embedded store is locked to this
// process, so claims of an earlier process are dead; a store passed in (a
// DynamoDB table another server may share) is not exclusive.
func TestExclusiveStoreOnlyWhenEmbedded(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		want bool
	}{
		{"embedded", Options{}, true},
		{"given", Options{Store: memstore.New()}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			o := c.opts
			o.Listen, o.House, o.Data, o.WorkerBin = "127.0.0.1:0", "h", filepath.Join(data, "d"), "/bin/true"
			srv, err := Start(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Shutdown(context.Background())
			if got := srv.Service.Config().ExclusiveStore; got != c.want {
				t.Fatalf("ExclusiveStore = %v, want %v", got, c.want)
			}
		})
	}
}
