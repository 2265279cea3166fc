"""A real tokenizer and a model that samples through it, built in the test
(nothing downloaded): byte-level BPE trained on a few strings, a
ChatML-style chat template with tools and `{% generation %}` (what TRL's
`assistant_only_loss` needs), and `TemplateModel`, which answers as a vLLM
server does: the prompt's ids are the template's rendering of the request
with the generation prompt, the reply's ids the tokens of the reply as the
template renders it (up to and with `<|im_end|>`, the stop token it
sampled), each with a logprob. Its replies come from a rollkit model
(the toy calculator), so rollouts run through the real lifecycle."""

from __future__ import annotations

from typing import Any

import rollkit as rk
from rollkit.core.messages import Request, Response, TokenLogprobs, Usage
from rollkit.interop.exports.branches import chat_message

CHAT_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'assistant' %}<|im_start|>assistant
{% generation %}{{ message.content }}{% if message.tool_calls %}{% for call in message.tool_calls %}<tool_call>
{{ {"name": call.function.name, "arguments": call.function.arguments} | tojson }}
</tool_call>{% endfor %}{% endif %}<|im_end|>{% endgeneration %}
{% elif message.role == 'tool' %}<|im_start|>tool
{{ message.content }}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

_CORPUS = ["The answer is 42.", "calculator expression arguments", "Ann has 34 apples and buys 8 more.",
           "Solve the problem. Use the calculator tool", "<tool_call> function name type object"]


def build_tokenizer() -> Any:
    """A transformers fast tokenizer with the template above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(_CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


class TemplateModel(rk.Model):
    """`inner`'s replies, with the token ids and logprobs a vLLM server
    serving `tokenizer` would return for them."""

    def __init__(self, inner: rk.Model, tokenizer: Any, name: str | None = None) -> None:
        self.inner, self.tokenizer = inner, tokenizer
        self.name = name or f"{inner.name}-tokens"
        self.calls = 0

    async def complete(self, request: Request) -> Response:
        response = await self.inner.complete(request)
        tok = self.tokenizer
        messages = [chat_message(m.model_dump()) for m in request.messages]
        tools = request.tools or None
        prompt_text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        whole = tok.apply_chat_template(messages + [chat_message(response.message.model_dump())], tools=tools,
                                        tokenize=False)
        assert whole.startswith(prompt_text)
        reply_text = whole[len(prompt_text):].removesuffix("\n")
        prompt_ids = tok.encode(prompt_text, add_special_tokens=False)
        ids = tok.encode(reply_text, add_special_tokens=False)
        self.calls += 1
        logprobs = [-0.25 * ((i + self.calls) % 4 + 1) for i in range(len(ids))]  # exact binary fractions
        return response.model_copy(update={
            "tokens": TokenLogprobs(prompt_ids=prompt_ids, ids=ids, logprobs=logprobs),
            "usage": Usage(input_tokens=len(prompt_ids), output_tokens=len(ids)),
        })
