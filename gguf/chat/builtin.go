package chat

import (
	"strings"
)

// builtinFormat renders a conversation without Jinja.
type builtinFormat func(messages []Message, addGenerationPrompt bool) string

// transcript is the format for models whose file has no chat template,
// such as base models that only continue text:
//
//   - a conversation of one message is that message's content, verbatim, so
//     a completion-style request is the plain prompt it looks like;
//   - otherwise each message is "Role: content" (the role capitalised),
//     messages separated by a blank line, and with addGenerationPrompt an
//     open "Assistant:" turn follows unless the last message is the
//     assistant's (which the model then continues).
func transcript(messages []Message, addGenerationPrompt bool) string {
	if len(messages) == 1 {
		return messages[0].Content
	}
	var b strings.Builder
	for i, m := range messages {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(roleName(m.Role))
		b.WriteString(": ")
		b.WriteString(m.Content)
	}
	if addGenerationPrompt && (len(messages) == 0 || messages[len(messages)-1].Role != "assistant") {
		if len(messages) > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("Assistant:")
	}
	return b.String()
}

func roleName(role string) string {
	if role == "" {
		return "User"
	}
	return strings.ToUpper(role[:1]) + role[1:]
}

// llama.cpp's built-in formats (src/llama-chat.cpp), used by name or when a
// template that Jinja cannot compile is recognisably one of them.
var builtinFormats = map[string]builtinFormat{
	"chatml": chatML,
	"llama2": llama2(false, false, false),
	"llama3": llama3,
	"phi3":   phi3,
	"gemma":  gemma,
}

func chatML(messages []Message, agp bool) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	if agp {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// llama2 is the [INST] format and its variants: a <<SYS>> block for the
// system message, <s> before each later turn, trimmed contents.
func llama2(system, bosInHistory, strip bool) builtinFormat {
	return func(messages []Message, _ bool) string {
		var b strings.Builder
		b.WriteString("[INST] ")
		inside := true
		for _, m := range messages {
			content := m.Content
			if strip {
				content = strings.TrimSpace(content)
			}
			if !inside {
				inside = true
				if bosInHistory {
					b.WriteString("<s>")
				}
				b.WriteString("[INST] ")
			}
			switch m.Role {
			case "system":
				if system {
					b.WriteString("<<SYS>>\n" + content + "\n<</SYS>>\n\n")
				} else {
					b.WriteString(content + "\n")
				}
			case "user":
				b.WriteString(content + " [/INST]")
			default:
				b.WriteString(content + "</s>")
				inside = false
			}
		}
		return b.String()
	}
}

func llama3(messages []Message, agp bool) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + strings.TrimSpace(m.Content) + "<|eot_id|>")
	}
	if agp {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return b.String()
}

func phi3(messages []Message, agp bool) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString("<|" + m.Role + "|>\n" + m.Content + "<|end|>\n")
	}
	if agp {
		b.WriteString("<|assistant|>\n")
	}
	return b.String()
}

// gemma has no system turn: the system text opens the next user turn.
func gemma(messages []Message, agp bool) string {
	var b strings.Builder
	system := ""
	for _, m := range messages {
		if m.Role == "system" {
			system += strings.TrimSpace(m.Content)
			continue
		}
		role := m.Role
		if role == "assistant" {
			role = "model"
		}
		b.WriteString("<start_of_turn>" + role + "\n")
		if system != "" && role != "model" {
			b.WriteString(system + "\n\n")
			system = ""
		}
		b.WriteString(strings.TrimSpace(m.Content) + "<end_of_turn>\n")
	}
	if agp {
		b.WriteString("<start_of_turn>model\n")
	}
	return b.String()
}

// detect recognises a template by the markers llama.cpp's
// llm_chat_detect_template looks for, restricted to the formats above.
func detect(src string) (string, builtinFormat, bool) {
	has := func(s string) bool { return strings.Contains(src, s) }
	switch {
	case has("<|im_start|>") && !has("<|im_sep|>") && !has("<end_of_utterance>"):
		return "chatml", chatML, true
	case has("[INST]") && has("<<SYS>>") && !has("[SYSTEM_PROMPT]") && !has("[AVAILABLE_TOOLS]"):
		return "llama2", llama2(true, has("bos_token + '[INST]"), has("content.strip()")), true
	case has("<|assistant|>") && has("<|end|>"):
		return "phi3", phi3, true
	case has("<start_of_turn>"):
		return "gemma", gemma, true
	case has("<|start_header_id|>") && has("<|end_header_id|>"):
		return "llama3", llama3, true
	}
	return "", nil, false
}
