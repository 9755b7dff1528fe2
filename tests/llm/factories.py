"""Factories for the model gateway's models."""

import factory

from llm.models import LLMCall, ModelProvider, ProviderKind


class ModelProviderFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelProvider
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"provider {n}")
    kind = ProviderKind.OPENAI
    base_url = "http://127.0.0.1:9/v1"
    chat_models = factory.LazyFunction(lambda: [{"name": "gpt-4", "context_window": 8192, "function_calling": True}])
    default_chat_model = "gpt-4"
    timeout_seconds = 3.0
    max_retries = 2

    @factory.post_generation
    def api_key(obj, create, extracted, **kwargs):
        if extracted:
            obj.set_api_key(extracted)
            if create:
                obj.save()


class LLMCallFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LLMCall

    model = "gpt-4"
    prompt_tokens = 10
    completion_tokens = 5
    total_tokens = factory.LazyAttribute(lambda o: o.prompt_tokens + o.completion_tokens)
