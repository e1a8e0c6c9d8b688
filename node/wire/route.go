package wire

import "github.com/meshnode/meshnode/node/wire/nodev1"

// DecodeRouteTableRequest decodes and validates the frame that opens a
// ROUTE_REQUEST stream (ValidateRouteTableRequest).
func DecodeRouteTableRequest(b []byte) (*nodev1.RouteTableRequest, error) {
	return decode(b, new(nodev1.RouteTableRequest), ValidateRouteTableRequest)
}

// ValidateRouteTableRequest checks that gen is ProtocolGeneration and
// requester_id is empty (a passive caller) or 32 bytes.
func ValidateRouteTableRequest(r *nodev1.RouteTableRequest) error {
	const msg = "RouteTableRequest"
	if err := checkGen(msg, r.GetGen()); err != nil {
		return err
	}
	if id := r.GetRequesterId(); len(id) != 0 && len(id) != EndpointIDLen {
		return invalid(msg, "requester_id", "length %d, want 0 or %d", len(id), EndpointIDLen)
	}
	return nil
}

// DecodeRouteTable decodes and validates the answer on a ROUTE_REQUEST
// stream (ValidateRouteTable).
func DecodeRouteTable(b []byte) (*nodev1.RouteTable, error) {
	return decode(b, new(nodev1.RouteTable), ValidateRouteTable)
}

// ValidateRouteTable checks that gen is ProtocolGeneration and every
// entry's endpoint_id is 32 bytes.
func ValidateRouteTable(t *nodev1.RouteTable) error {
	const msg = "RouteTable"
	if err := checkGen(msg, t.GetGen()); err != nil {
		return err
	}
	for i, e := range t.GetEntries() {
		if err := checkID("RouteEntry", "endpoint_id", e.GetEndpointId()); err != nil {
			return within(err, msg, index("entries", i))
		}
	}
	return nil
}
