// Parks records the way a Spring Kafka service does, with no Spring Boot: a listener container
// whose DefaultErrorHandler hands failed records to a DeadLetterPublishingRecoverer, which
// publishes them through a KafkaTemplate and a DefaultKafkaProducerFactory.
//
//   java -cp 'LIBS/*:CLASSES' SpringDeadLetters BOOTSTRAP TOPIC GROUP COUNT
//
// Each record's value is read as a 4-byte big-endian int (IntegerDeserializer behind an
// ErrorHandlingDeserializer): any other value fails to deserialize. The listener declines
// every amount over 1000. It exits 0 once COUNT records were parked, 1 after 60 s without.

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.IntegerDeserializer;
import org.apache.kafka.common.serialization.IntegerSerializer;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaOperations;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.support.serializer.ErrorHandlingDeserializer;
import org.springframework.util.backoff.FixedBackOff;

public final class SpringDeadLetters {

    private SpringDeadLetters() {
    }

    private static DefaultKafkaProducerFactory<Object, Object> producers(String bootstrap, Class<?> values) {
        return new DefaultKafkaProducerFactory<>(Map.of(
                ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class,
                ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, values));
    }

    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        CountDownLatch parked = new CountDownLatch(Integer.parseInt(args[3]));

        // A declined record goes back as the Integer it was read as; one that could not be read
        // goes back as its original bytes: one template per value type, as Spring's guide does.
        DefaultKafkaProducerFactory<Object, Object> integers = producers(bootstrap, IntegerSerializer.class);
        DefaultKafkaProducerFactory<Object, Object> bytes = producers(bootstrap, ByteArraySerializer.class);
        Map<Class<?>, KafkaOperations<?, ?>> templates = new LinkedHashMap<>();
        templates.put(Integer.class, new KafkaTemplate<>(integers));
        templates.put(byte[].class, new KafkaTemplate<>(bytes));
        DeadLetterPublishingRecoverer recoverer = new DeadLetterPublishingRecoverer(templates);
        DefaultErrorHandler errors = new DefaultErrorHandler((record, exception) -> {
            recoverer.accept(record, exception);
            parked.countDown();
        }, new FixedBackOff(0L, 0L));

        DefaultKafkaConsumerFactory<byte[], Integer> consumers = new DefaultKafkaConsumerFactory<>(Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class,
                ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ErrorHandlingDeserializer.class,
                ErrorHandlingDeserializer.VALUE_DESERIALIZER_CLASS, IntegerDeserializer.class));
        ContainerProperties properties = new ContainerProperties(topic);
        properties.setGroupId(group);
        properties.setMessageListener((MessageListener<byte[], Integer>) record -> {
            if (record.value() > 1000) {
                throw new IllegalStateException(
                        "card declined: amount " + record.value() + " is over the limit of 1000");
            }
        });
        KafkaMessageListenerContainer<byte[], Integer> container =
                new KafkaMessageListenerContainer<>(consumers, properties);
        container.setCommonErrorHandler(errors);
        container.start();
        boolean done = parked.await(60, TimeUnit.SECONDS);
        container.stop();
        integers.destroy();
        bytes.destroy();
        System.exit(done ? 0 : 1);
    }
}
