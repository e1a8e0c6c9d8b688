package control

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDecodeFacadeJSON: a facade command's body is one JSON object of
// known fields and nothing after it; trailing data (a stray bracket,
// which a decoder reading one value does not see, or a second value) is
// a BAD_REQUEST like an unknown field.
func TestDecodeFacadeJSON(t *testing.T) {
	for body, ok := range map[string]bool{
		`{"a":1}`:       true,
		"{\"a\":1}\n":   true,
		`{"a":1}}`:      false,
		`{"a":1} {}`:    false,
		`{"a":1,"b":2}`: false,
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		var v struct {
			A int `json:"a"`
		}
		if got := decodeFacadeJSON(w, r, &v, "a test body"); got != ok || !ok && w.Code != 400 {
			t.Errorf("%q: decoded %v (status %d), want %v", body, got, w.Code, ok)
		}
	}
}
