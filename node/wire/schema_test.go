package wire

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// schemaTable is spec/node-proto-fields.md, the upstream schema's fields,
// committed so the test runs from a clean clone.
const schemaTable = "testdata/node-proto-fields.md"

type tableField struct {
	message, name, typ, label string
	tag                       int
}

type table struct {
	fields []tableField
	enums  map[string][]string // enum -> "NAME=number", in order
	order  []string            // enums in table order
	totals [4]int              // messages, fields, enums, enum values as the table states them
}

func readTable(t *testing.T) table {
	t.Helper()
	f, err := os.Open(schemaTable)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tb := table{enums: map[string][]string{}}
	totals := regexp.MustCompile(`^Totals: (\d+) messages, (\d+) fields, (\d+) enums, (\d+) enum values\.$`)
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := totals.FindStringSubmatch(line); m != nil {
			for i := range tb.totals {
				tb.totals[i], _ = strconv.Atoi(m[i+1])
			}
		}
		if strings.HasPrefix(line, "## ") {
			section = strings.Fields(line)[1]
			continue
		}
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case section == "Messages" && len(cells) == 6 && cells[0] != "Message":
			tag, err := strconv.Atoi(cells[2])
			if err != nil {
				t.Fatalf("%s: bad tag in %q", schemaTable, line)
			}
			tb.fields = append(tb.fields, tableField{cells[0], cells[1], cells[3], cells[4], tag})
		case section == "Enums" && len(cells) == 2 && cells[0] != "Enum":
			for _, v := range strings.Split(cells[1], ",") {
				tb.enums[cells[0]] = append(tb.enums[cells[0]], strings.TrimSpace(v))
			}
			tb.order = append(tb.order, cells[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if tb.totals == [4]int{} {
		t.Fatalf("%s: no Totals line", schemaTable)
	}
	return tb
}

// extensionsDoc is the page whose "meshnode extensions" section lists, in
// the table's own format, the fields and enums meshnode adds to the
// upstream schema.
const extensionsDoc = "../../docs/wire.md"

// readExtensions reads the extension tables of extensionsDoc: field rows
// (six cells) and enum rows (two), between its "## meshnode extensions"
// heading and the next heading of that level.
func readExtensions(t *testing.T) table {
	t.Helper()
	b, err := os.ReadFile(extensionsDoc)
	if err != nil {
		t.Fatal(err)
	}
	tb := table{enums: map[string][]string{}}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.EqualFold(strings.TrimSpace(line[3:]), "meshnode extensions")
			continue
		}
		if !in || !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case len(cells) == 6 && cells[0] != "Message":
			tag, err := strconv.Atoi(cells[2])
			if err != nil {
				t.Fatalf("%s: bad tag in %q", extensionsDoc, line)
			}
			tb.fields = append(tb.fields, tableField{cells[0], cells[1], cells[3], cells[4], tag})
		case len(cells) == 2 && cells[0] != "Enum":
			for _, v := range strings.Split(cells[1], ",") {
				tb.enums[cells[0]] = append(tb.enums[cells[0]], strings.TrimSpace(v))
			}
			tb.order = append(tb.order, cells[0])
		}
	}
	if len(tb.fields) == 0 {
		t.Fatalf("%s: no meshnode extensions table", extensionsDoc)
	}
	return tb
}

// typeName renders a field's type as the table writes it.
func typeName(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map<" + typeName(fd.MapKey()) + ", " + typeName(fd.MapValue()) + ">"
	case fd.Kind() == protoreflect.MessageKind:
		return string(fd.Message().Name())
	case fd.Kind() == protoreflect.EnumKind:
		return string(fd.Enum().Name())
	}
	return fd.Kind().String()
}

func labelName(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map"
	case fd.IsList():
		return "repeated"
	case fd.HasOptionalKeyword():
		return "optional"
	}
	return "-"
}

// TestSchemaMatchesTable holds node.proto, through the descriptor compiled
// into nodev1, to the upstream field table: every message, field, tag,
// type, label, reserved tag and enum value, and nothing more.
//
// meshnode's own additions are held to docs/wire.md's extension table the
// same way: a field added to an upstream message takes a tag of 1000 or
// more, clear of any upstream adds, and a message or enum of its own is
// named Meshnode*.
func TestSchemaMatchesTable(t *testing.T) {
	up := readTable(t)
	ext := readExtensions(t)
	upstreamMessages := map[string]bool{}
	for _, f := range up.fields {
		upstreamMessages[f.message] = true
	}
	for _, f := range ext.fields {
		if upstreamMessages[f.message] && f.tag < 1000 {
			t.Errorf("extension %s.%s: tag %d, want 1000 or more in an upstream message", f.message, f.name, f.tag)
		}
		if !upstreamMessages[f.message] && !strings.HasPrefix(f.message, "Meshnode") {
			t.Errorf("extension message %s: want a Meshnode prefix", f.message)
		}
	}
	for _, e := range ext.order {
		if !strings.HasPrefix(e, "Meshnode") {
			t.Errorf("extension enum %s: want a Meshnode prefix", e)
		}
	}
	if want := [4]int{74, 377, 15, 77}; up.totals != want {
		t.Errorf("upstream table totals %v, the issue states %v", up.totals, want)
	}
	tb := up
	tb.fields = append(slices.Clone(up.fields), ext.fields...)
	tb.order = append(slices.Clone(up.order), ext.order...)
	tb.enums = maps.Clone(up.enums)
	maps.Copy(tb.enums, ext.enums)
	fd := nodev1.File_meshllm_node_v1_node_proto
	if fd.Package() != "meshllm.node.v1" || fd.Syntax() != protoreflect.Proto3 {
		t.Fatalf("file is %s %v, want proto3 package meshllm.node.v1", fd.Package(), fd.Syntax())
	}

	// Messages and fields.
	perMessage := map[string]int{}
	var messageOrder []string
	nFields := 0
	for _, f := range tb.fields {
		if perMessage[f.message] == 0 {
			messageOrder = append(messageOrder, f.message)
		}
		perMessage[f.message]++
		md := fd.Messages().ByName(protoreflect.Name(f.message))
		if md == nil {
			t.Errorf("message %s: missing", f.message)
			continue
		}
		if f.name == "(reserved)" {
			perMessage[f.message]-- // not a field
			if !md.ReservedRanges().Has(protoreflect.FieldNumber(f.tag)) {
				t.Errorf("%s: tag %d not reserved", f.message, f.tag)
			}
			if !md.ReservedNames().Has("artifact_transfer_supported") {
				t.Errorf("%s: name artifact_transfer_supported not reserved", f.message)
			}
			continue
		}
		nFields++
		field := md.Fields().ByName(protoreflect.Name(f.name))
		if field == nil {
			t.Errorf("%s.%s: missing", f.message, f.name)
			continue
		}
		if int(field.Number()) != f.tag {
			t.Errorf("%s.%s: tag %d, table says %d", f.message, f.name, field.Number(), f.tag)
		}
		if got := typeName(field); got != f.typ {
			t.Errorf("%s.%s: type %s, table says %s", f.message, f.name, got, f.typ)
		}
		if got := labelName(field); got != f.label {
			t.Errorf("%s.%s: label %s, table says %s", f.message, f.name, got, f.label)
		}
	}
	if fd.Messages().Len() != len(messageOrder) {
		t.Errorf("proto has %d messages, table %d", fd.Messages().Len(), len(messageOrder))
	}
	for i := range fd.Messages().Len() {
		md := fd.Messages().Get(i)
		if n := md.Fields().Len(); n != perMessage[string(md.Name())] {
			t.Errorf("message %s: %d fields, table has %d", md.Name(), n, perMessage[string(md.Name())])
		}
		for j := range md.Messages().Len() {
			if !md.Messages().Get(j).IsMapEntry() {
				t.Errorf("message %s: nested message %s, table has none", md.Name(), md.Messages().Get(j).Name())
			}
		}
		if n := md.Enums().Len(); n != 0 {
			t.Errorf("message %s: %d nested enums, table has none", md.Name(), n)
		}
		if md.Oneofs().Len() != countOptional(md) {
			t.Errorf("message %s: has a oneof beyond proto3 optional, table has none", md.Name())
		}
	}

	// Enums.
	nValues := 0
	if fd.Enums().Len() != len(tb.order) {
		t.Errorf("proto has %d enums, table %d", fd.Enums().Len(), len(tb.order))
	}
	for _, name := range tb.order {
		ed := fd.Enums().ByName(protoreflect.Name(name))
		if ed == nil {
			t.Errorf("enum %s: missing", name)
			continue
		}
		values := tb.enums[name]
		nValues += len(values)
		if ed.Values().Len() != len(values) {
			t.Errorf("enum %s: %d values, table has %d", name, ed.Values().Len(), len(values))
		}
		for _, v := range values {
			vname, num, _ := strings.Cut(v, "=")
			n, err := strconv.Atoi(num)
			if err != nil {
				t.Fatalf("%s: enum %s: bad value %q", schemaTable, name, v)
			}
			vd := ed.Values().ByName(protoreflect.Name(vname))
			if vd == nil || int(vd.Number()) != n {
				t.Errorf("enum %s: value %s=%d missing or renumbered", name, vname, n)
			}
		}
	}

	got := [4]int{len(messageOrder), nFields, len(tb.order), nValues}
	extMessages, extValues := 0, 0
	seen := map[string]bool{}
	for _, f := range ext.fields {
		if !upstreamMessages[f.message] && !seen[f.message] {
			seen[f.message] = true
			extMessages++
		}
	}
	for _, v := range ext.enums {
		extValues += len(v)
	}
	want := up.totals
	want[0] += extMessages
	want[1] += len(ext.fields)
	want[2] += len(ext.order)
	want[3] += extValues
	if got != want {
		t.Errorf("rows count %v (messages, fields, enums, values), the upstream Totals line and the extensions make %v", got, want)
	}
}

// countOptional counts the synthetic oneofs proto3 optional fields make.
func countOptional(md protoreflect.MessageDescriptor) int {
	n := 0
	for i := range md.Fields().Len() {
		if md.Fields().Get(i).HasOptionalKeyword() {
			n++
		}
	}
	return n
}

// TestExtensionSkippedByUpstream: an announcement carrying meshnode's
// extension decodes under the upstream schema (node.proto without the
// extension tables of docs/wire.md), which keeps every upstream field and
// leaves the extension as unknown bytes: what a mesh-llm peer does with
// it.
func TestExtensionSkippedByUpstream(t *testing.T) {
	fdp := protodesc.ToFileDescriptorProto(nodev1.File_meshllm_node_v1_node_proto)
	ext := readExtensions(t)
	drop := map[string]bool{}
	for _, f := range ext.fields {
		drop[f.message+"."+f.name] = true
	}
	var msgs []*descriptorpb.DescriptorProto
	for _, m := range fdp.MessageType {
		if strings.HasPrefix(m.GetName(), "Meshnode") {
			continue
		}
		m.Field = slices.DeleteFunc(m.Field, func(f *descriptorpb.FieldDescriptorProto) bool { return drop[m.GetName()+"."+f.GetName()] })
		msgs = append(msgs, m)
	}
	fdp.MessageType = msgs
	fdp.EnumType = slices.DeleteFunc(fdp.EnumType, func(e *descriptorpb.EnumDescriptorProto) bool {
		return strings.HasPrefix(e.GetName(), "Meshnode")
	})
	upstream, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}

	f := sampleGossipFrame()
	f.Peers[0].MeshnodeModelLoad = sampleModelLoads()
	b, err := proto.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	theirs := dynamicpb.NewMessage(upstream.Messages().ByName("GossipFrame"))
	if err := proto.Unmarshal(b, theirs); err != nil {
		t.Fatalf("the upstream schema does not parse our announcement: %v", err)
	}
	// Every upstream field survives; the extension is unknown bytes.
	f.Peers[0].MeshnodeModelLoad = nil
	plain, _ := proto.MarshalOptions{Deterministic: true}.Marshal(f)
	peer := theirs.Get(upstream.Messages().ByName("GossipFrame").Fields().ByName("peers")).List().Get(0).Message()
	if len(peer.GetUnknown()) == 0 {
		t.Fatal("the extension did not reach the upstream schema as unknown fields")
	}
	peer.SetUnknown(nil)
	again, _ := proto.MarshalOptions{Deterministic: true}.Marshal(theirs.Interface())
	if !bytes.Equal(again, plain) {
		t.Fatal("the upstream schema's view of our announcement differs from the announcement without the extension")
	}
}
