package standin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

func TestEnvReport(t *testing.T) {
	secret := "value-" + newID()
	var got map[string]string
	if err := json.Unmarshal([]byte(EnvReport([]string{"A=" + secret, "EMPTY=", "EQ=a=b"})), &got); err != nil {
		t.Fatal(err)
	}
	sum := func(v string) string { s := sha256.Sum256([]byte(v)); return hex.EncodeToString(s[:])[:16] }
	if len(got) != 3 || got["A"] != sum(secret) || got["EMPTY"] != sum("") || got["EQ"] != sum("a=b") {
		t.Errorf("report = %v", got)
	}
	if strings.Contains(EnvReport([]string{"A=" + secret}), secret) {
		t.Error("the report holds a value")
	}
}
