package modeltest

import (
	"fmt"
	"io"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Requantize writes to dst a copy of the GGUF at src with every matrix
// (a tensor of two or more dimensions whose rows are whole blocks of typ)
// quantised to typ, "pure" as llama-quantize --pure makes it: vectors
// stay as they are, and so do matrices whose rows typ cannot hold. It
// makes a more quantised copy of a model, the simplest draft for it.
// general.file_type is dropped (the weights' types say what they are).
func Requantize(src, dst string, typ quant.Type) error {
	f, err := gguf.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	w := gguf.NewWriter()
	if err := copyMetadata(w, f.Metadata, nil); err != nil {
		return fmt.Errorf("requantize %s: %w", src, err)
	}
	for _, t := range f.Tensors {
		data, err := f.TensorData(t)
		if err != nil {
			return fmt.Errorf("requantize %s: %w", src, err)
		}
		if len(t.Dims) < 2 || t.Type == typ || t.RowLen()%int64(typ.BlockSize()) != 0 {
			if err := w.AddTensor(t.Name, t.Type, t.Dims, data); err != nil {
				return err
			}
			continue
		}
		floats := make([]float32, t.Elements())
		if err := quant.Dequantize(t.Type, data, floats); err != nil {
			return fmt.Errorf("requantize %s: %s: %w", src, t.Name, err)
		}
		q := make([]byte, t.Rows()*int64(typ.TypeSize())*(t.RowLen()/int64(typ.BlockSize())))
		if err := quant.Quantize(typ, floats, q); err != nil {
			return fmt.Errorf("requantize %s: %s: %w", src, t.Name, err)
		}
		if err := w.AddTensor(t.Name, typ, t.Dims, q); err != nil {
			return err
		}
	}
	return writeFile(dst, func(out io.Writer) error {
		_, err := w.WriteTo(out)
		return err
	})
}

// copyMetadata sets on w every key of md but general.file_type (a copy
// whose weights change type says what they are by their types), with
// rewrite's values in place of md's for the keys it holds.
func copyMetadata(w *gguf.Writer, md *gguf.Metadata, rewrite map[string]any) error {
	for k, v := range md.All() {
		if k == "general.file_type" {
			continue
		}
		val, ok := rewrite[k]
		if !ok {
			val = v.Interface()
		}
		if err := w.Set(k, val); err != nil {
			return err
		}
	}
	return nil
}
