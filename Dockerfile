# DaisyChain as a Hugging Face Docker Space (README front matter: sdk: docker, app_port: 7860).
# The install step is the README's (a virtual environment, then `pip install .` into it), so CI's
# README path tests it; it runs as root, then the app runs as the Space's uid 1000 user.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 1000 user
WORKDIR /home/user/app
COPY --chown=user . .
RUN python -m venv /opt/venv && /opt/venv/bin/pip install .
ENV PATH=/opt/venv/bin:$PATH

USER user
ENV HOME=/home/user
EXPOSE 7860
# The Space's reverse proxy sets X-Forwarded-For, so --trust-proxy groups devices by their real
# public address. Never pass it without such a proxy in front: clients could pick their group.
CMD ["python", "-m", "daisychain.server", "--host", "0.0.0.0", "--port", "7860", "--trust-proxy"]
